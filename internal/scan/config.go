package scan

import (
	"errors"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/hourglass-sched/hourglass/internal/confcheck"
	"github.com/hourglass-sched/hourglass/internal/shard"
)

// ErrInvalidConfig wraps every Config validation failure.
var ErrInvalidConfig = errors.New("scan: invalid config")

// Defaults for Config's zero fields and the limits Validate enforces;
// internal/config states the scheduler's keys with them.
const (
	DefaultLimit = 512
	MaxLimit     = 10000
	// DefaultSafetyRecheck is the longest a mover sleeps without a
	// wake-up; it is at least MinSafetyRecheck.
	DefaultSafetyRecheck = 30 * time.Second
	MinSafetyRecheck     = 100 * time.Millisecond
	// DefaultIdleRecheck is the longest a mover sleeps without a wake-up
	// while its wake-up subscription is confirmed.
	DefaultIdleRecheck = 5 * time.Minute
	// DefaultPrefetch is the prefetch the scheduler binary runs with:
	// most tasks are then popped before they are due and start on time,
	// without a round trip between their due time and their start, and
	// each mover call at a steady rate carries about 25 ms of a shard's
	// tasks. A held task keeps a handler slot for at most this long.
	DefaultPrefetch = 50 * time.Millisecond
)

// Config configures a Mover. Zero fields take the defaults above;
// Prefetch's zero means none (DefaultConfig has DefaultPrefetch).
type Config struct {
	// Limit is the most tasks one script call moves, at most MaxLimit.
	Limit int
	// SafetyRecheck bounds every sleep while the shard's wake-up
	// subscription is not confirmed (owner.Shard.Subscribed): the mover
	// runs at least this often even if no wake-up arrives (one published
	// before the subscription was in place is lost).
	SafetyRecheck time.Duration
	// IdleRecheck bounds every sleep while the subscription is confirmed:
	// producers' wake-ups then reach the mover, and one lost to a broken
	// connection is followed by a new confirmation when it is back, which
	// wakes the mover too (a silently dead connection is found by the
	// hub's health check, internal/fanout.HealthCheck). What only this
	// check finds is a task written by hand without a wake-up, so it can
	// be long, and it reads only the head of the delayed set (one
	// command) unless that changed: an idle shard then costs Redis one
	// command per IdleRecheck. A value below SafetyRecheck is raised to
	// it.
	IdleRecheck time.Duration
	// Prefetch moves tasks up to this long before they are due (0: when
	// due), in whole milliseconds up to shard.MaxPrefetch. Workers hold
	// each until its due time. The mover then sleeps until the next task
	// is half the prefetch from due, so each call moves about half a
	// prefetch's worth of tasks per shard: fewer, larger calls at a
	// steady rate.
	Prefetch time.Duration
	// Logger receives the mover's logs; default: discard.
	Logger hclog.Logger
	// Metrics records the mover's figures; nil records nothing.
	Metrics *Metrics
	// Moved, when set, is called after each call that moved tasks of
	// shard sh into its ready lists (the queue history's depth sampler
	// looks at active shards only).
	Moved func(sh int)
}

// DefaultConfig returns the mover's defaults, those the scheduler binary
// runs with unless configured.
func DefaultConfig() Config {
	return Config{Limit: DefaultLimit, SafetyRecheck: DefaultSafetyRecheck, IdleRecheck: DefaultIdleRecheck, Prefetch: DefaultPrefetch}
}

// Validate reports every field the mover cannot run with, each a
// *confcheck.FieldError wrapping ErrInvalidConfig. Zero fields are valid:
// Limit, SafetyRecheck and IdleRecheck then mean the defaults, Prefetch
// none.
func (c Config) Validate() error {
	p := confcheck.New(ErrInvalidConfig)
	if c.Limit != 0 {
		p.IntRange("Limit", int64(c.Limit), 1, MaxLimit)
	}
	if c.SafetyRecheck != 0 {
		p.DurationRange("SafetyRecheck", c.SafetyRecheck, MinSafetyRecheck, 0)
	}
	if c.IdleRecheck != 0 {
		p.DurationRange("IdleRecheck", c.IdleRecheck, MinSafetyRecheck, 0)
	}
	p.DurationRange("Prefetch", c.Prefetch, 0, shard.MaxPrefetch)
	p.Whole("Prefetch", c.Prefetch, time.Millisecond)
	return p.Err()
}

// withDefaults returns c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	c.Limit = confcheck.Or(c.Limit, DefaultLimit)
	c.SafetyRecheck = confcheck.Or(c.SafetyRecheck, DefaultSafetyRecheck)
	c.IdleRecheck = max(confcheck.Or(c.IdleRecheck, DefaultIdleRecheck), c.SafetyRecheck)
	c.Logger = confcheck.Or(c.Logger, hclog.NewNullLogger())
	return c
}
