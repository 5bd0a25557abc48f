package fire

import (
	"errors"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/hourglass-sched/hourglass/internal/confcheck"
	"github.com/hourglass-sched/hourglass/internal/history"
	"github.com/hourglass-sched/hourglass/periodic"
)

// Timing of the loop.
const (
	// Lead is how long before its occurrence an occurrence is fired
	// (its task stored, due at the occurrence), at most half the time
	// since the previous occurrence. Overlap skip fires at the
	// occurrence.
	Lead = 500 * time.Millisecond
	// DefaultMisfireGrace is Config.MisfireGrace's default, Quartz's
	// misfire threshold: it covers an owner's death (the lease TTL, at
	// most a minute, and a second) and a short stall or Redis outage.
	DefaultMisfireGrace = time.Minute
	// MinMisfireGrace is the least Config.MisfireGrace: a hand-over or a
	// loaded machine makes an occurrence that late.
	MinMisfireGrace = 2 * time.Second
)

// ErrInvalidConfig wraps every Config validation failure.
var ErrInvalidConfig = errors.New("fire: invalid config")

// Config configures a Firer.
type Config struct {
	// Schedules are fired by the owners of their home shards.
	Schedules []*periodic.Compiled
	// MisfireGrace is how late an occurrence may be and still be fired
	// (late, once), whatever the schedule's catch-up policy; an
	// occurrence missed longer ago is the policy's. At least
	// MinMisfireGrace; 0 means DefaultMisfireGrace.
	MisfireGrace time.Duration
	Logger       hclog.Logger
	Metrics      *Metrics
	// History counts the occurrences whose task was stored in their
	// queue's minute history; nil counts nothing.
	History *history.Recorder
}

// Validate reports every field a Firer cannot run with, each a
// *confcheck.FieldError wrapping ErrInvalidConfig. Zero fields are
// valid: they mean the defaults.
func (c Config) Validate() error {
	p := confcheck.New(ErrInvalidConfig)
	if c.MisfireGrace != 0 {
		p.DurationRange("MisfireGrace", c.MisfireGrace, MinMisfireGrace, 0)
	}
	return p.Err()
}
