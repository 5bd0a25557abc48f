package recovery

import (
	"errors"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hourglass-sched/hourglass/internal/confcheck"
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
)

// Config configures a Recoverer. Zero fields take the defaults above;
// DeadMaxSize and DeadMaxAge are 0 (unbounded) unless set.
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
	// DeadMaxSize and DeadMaxAge bound each shard's dead-letter set.
	DeadMaxSize int
	DeadMaxAge  time.Duration
	Logger      hclog.Logger
	Metrics     *Metrics
}

// Validate reports every field the loop cannot run with, each error
// wrapping ErrInvalidConfig. Zero fields are valid: they mean the
// defaults (and no dead-letter bound).
func (c Config) Validate() error {
	p := confcheck.New(ErrInvalidConfig)
	bad := p.Addf
	if c.Limit < 0 || c.Limit > MaxLimit {
		bad("Limit %d not in 1..%d (0: the default)", c.Limit, MaxLimit)
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"StrandCheck", c.StrandCheck}, {"SafetyRecheck", c.SafetyRecheck}, {"IdleRecheck", c.IdleRecheck}} {
		if f.d < 0 || (f.d > 0 && f.d < MinInterval) {
			bad("%s %s below %s", f.name, f.d, MinInterval)
		}
	}
	if c.DeadMaxSize < 0 || c.DeadMaxAge < 0 {
		bad("negative dead-letter bound")
	}
	return p.Err()
}

// withDefaults returns c with zero fields set to their defaults and
// IdleRecheck raised to SafetyRecheck.
func (c Config) withDefaults() Config {
	if c.Limit == 0 {
		c.Limit = DefaultLimit
	}
	if c.StrandCheck == 0 {
		c.StrandCheck = DefaultStrandCheck
	}
	if c.SafetyRecheck == 0 {
		c.SafetyRecheck = DefaultSafetyRecheck
	}
	if c.IdleRecheck == 0 {
		c.IdleRecheck = DefaultIdleRecheck
	}
	c.IdleRecheck = max(c.IdleRecheck, c.SafetyRecheck)
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return c
}
