package recovery

import (
	"errors"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hourglass-sched/hourglass/internal/confcheck"
	"github.com/hourglass-sched/hourglass/internal/history"
)

// ErrInvalidConfig wraps every Config validation failure.
var ErrInvalidConfig = errors.New("recovery: invalid config")

// Defaults for Config's zero fields and the limits Validate enforces;
// internal/config states the scheduler's keys with them.
const (
	DefaultLimit         = 512
	MaxLimit             = 10000
	DefaultStrandCheck   = 5 * time.Second
	DefaultSafetyRecheck = 30 * time.Second
	DefaultIdleRecheck   = 5 * time.Minute
	// MinInterval is the least StrandCheck, SafetyRecheck and IdleRecheck.
	MinInterval = 100 * time.Millisecond
	// DefaultDeadMaxSize and DefaultDeadMaxAge are DefaultConfig's
	// dead-letter bounds (dlq.max_size, dlq.max_age): a week of dead
	// letters, at most 100,000 per shard, so that a failing handler
	// cannot fill Redis's memory with them while nobody looks.
	DefaultDeadMaxSize = 100000
	DefaultDeadMaxAge  = 7 * 24 * time.Hour
)

// DefaultConfig returns the recovery loop's defaults, those the scheduler
// binary runs with unless configured: the dead-letter bounds among them.
func DefaultConfig() Config {
	return Config{
		Limit: DefaultLimit, StrandCheck: DefaultStrandCheck, SafetyRecheck: DefaultSafetyRecheck, IdleRecheck: DefaultIdleRecheck,
		DeadMaxSize: DefaultDeadMaxSize, DeadMaxAge: DefaultDeadMaxAge,
	}
}

// Config configures a Recoverer. Zero fields take the defaults above,
// except DeadMaxSize and DeadMaxAge, whose zero means unbounded (as
// dlq.max_size's and dlq.max_age's 0 does): DefaultConfig bounds them.
type Config struct {
	// Limit bounds each part of one pass, at most MaxLimit.
	Limit int
	// StrandCheck is the spacing of stranded-id checks; an id popped and
	// neither settled nor leased counts a failed attempt at the first check
	// that comes shard.UnleasedGrace or more after the check that saw it.
	StrandCheck time.Duration
	// SafetyRecheck bounds every sleep of a shard with leased or ready ids.
	SafetyRecheck time.Duration
	// IdleRecheck bounds the sleep of an idle shard (nothing leased,
	// nothing ready): its work can only come from the mover, which pokes
	// the loop, so this check is a backstop and for dead-letter retention.
	// A value below SafetyRecheck is raised to it.
	IdleRecheck time.Duration
	// DeadMaxSize and DeadMaxAge bound each shard's dead-letter set, 0 or
	// more; 0 means unbounded.
	DeadMaxSize int
	DeadMaxAge  time.Duration
	Logger      hclog.Logger
	Metrics     *Metrics
	// History counts the failed attempts a pass finds (leases that
	// expired, tasks a worker lost) in their queues' minute history; nil
	// counts nothing.
	History *history.Recorder
}

// Validate reports every field the loop cannot run with, each a
// *confcheck.FieldError wrapping ErrInvalidConfig. Zero fields are valid:
// they mean the defaults (and no dead-letter bound).
func (c Config) Validate() error {
	p := confcheck.New(ErrInvalidConfig)
	if c.Limit != 0 {
		p.IntRange("Limit", int64(c.Limit), 1, MaxLimit)
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"StrandCheck", c.StrandCheck}, {"SafetyRecheck", c.SafetyRecheck}, {"IdleRecheck", c.IdleRecheck}} {
		if f.d != 0 {
			p.DurationRange(f.name, f.d, MinInterval, 0)
		}
	}
	p.AtLeast("DeadMaxSize", int64(c.DeadMaxSize), 0)
	p.DurationRange("DeadMaxAge", c.DeadMaxAge, 0, 0)
	return p.Err()
}

// withDefaults returns c with zero fields set to their defaults and
// IdleRecheck raised to SafetyRecheck.
func (c Config) withDefaults() Config {
	c.Limit = confcheck.Or(c.Limit, DefaultLimit)
	c.StrandCheck = confcheck.Or(c.StrandCheck, DefaultStrandCheck)
	c.SafetyRecheck = confcheck.Or(c.SafetyRecheck, DefaultSafetyRecheck)
	c.IdleRecheck = max(confcheck.Or(c.IdleRecheck, DefaultIdleRecheck), c.SafetyRecheck)
	c.Logger = confcheck.Or(c.Logger, hclog.NewNullLogger())
	return c
}
