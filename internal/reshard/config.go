package reshard

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/hourglass-sched/hourglass/internal/confcheck"
)

// ErrInvalidConfig wraps every Config validation failure.
var ErrInvalidConfig = errors.New("reshard: invalid config")

// Defaults for Config's zero fields and the limits Validate enforces;
// internal/config states the scheduler's keys with them.
const (
	DefaultBatch = 512
	// MaxBatch is the largest Batch.
	MaxBatch      = 10000
	DefaultMargin = time.Second
	DefaultRetry  = time.Second
	// DefaultRate is DefaultConfig's Rate (scheduler.reshard_rate): at
	// 5,000 tasks a second per replica a change of the shard count costs
	// the load little lateness (docs/resharding.md), where an unbounded
	// one competes with it for Redis. Rate's zero means no bound.
	DefaultRate = 5000
	// MaxRate is the largest Rate.
	MaxRate = 1_000_000
	// DefaultReadyAfter is DefaultConfig's ReadyAfter
	// (scheduler.reshard_ready_after): a ready task that waited a minute
	// has no worker coming for it soon, and the change should not wait
	// for one.
	DefaultReadyAfter = time.Minute
)

// DefaultConfig returns the reshard loop's defaults, those the scheduler
// binary runs with unless configured: the rate bound among them.
func DefaultConfig() Config {
	return Config{Batch: DefaultBatch, Margin: DefaultMargin, Retry: DefaultRetry, Rate: DefaultRate, ReadyAfter: DefaultReadyAfter}
}

// Config configures a Resharder. Zero fields take the defaults above,
// except Rate, whose zero means no bound (as scheduler.reshard_rate's 0
// does), and ReadyAfter, whose zero means never: DefaultConfig sets
// both.
type Config struct {
	// Batch bounds the ids of one scan step and one export, at most
	// MaxBatch (default DefaultBatch).
	Batch int
	// Margin: a task due sooner stays in its shard (default
	// DefaultMargin).
	Margin time.Duration
	// Retry is the pause after a failed step, and between passes while
	// tasks in flight keep a shard from being done (default DefaultRetry).
	Retry time.Duration
	// Rate bounds the tasks moved per second, by all of this Resharder's
	// shards together, 0 to MaxRate; 0: no bound. A batch of n tasks
	// waits n/Rate before the next one starts.
	Rate int
	// ReadyAfter: a ready task whose shard changes and that has waited
	// longer than this in its ready list (by its due time), or at once
	// when its queue is paused, is moved to its new shard, where it is
	// ready again (shard.Store.ExportReady): otherwise a queue nobody
	// consumes keeps its old shard, and the change, from ending. Nothing
	// is lost: the task keeps its data and attempts; only its place in
	// the queue's order changes. 0 leaves ready tasks where they are
	// until workers take them (the change then waits for them), as
	// DefaultConfig's zero value does not: it sets DefaultReadyAfter.
	ReadyAfter time.Duration
	// Paused, if set, returns the paused queues
	// (shard.Store.Paused); without it no queue counts as paused.
	Paused func(context.Context) (map[string]time.Time, error)
	// Schedules, if set, returns the names of the periodic schedules the
	// schedulers fire (fire.Firer.Names): at the start of every pass those
	// whose home leaves the shard are handed over to their new homes
	// (shard.Store.HandOverSchedules), so a shard is done only once they
	// are.
	Schedules func() []string
	// Logger receives the reshard loop's logs; default: discard.
	Logger hclog.Logger
	// Metrics records the reshard loop's figures; nil records nothing.
	Metrics *Metrics
}

// Validate reports every field the reshard loop cannot run with, each a
// *confcheck.FieldError wrapping ErrInvalidConfig. Zero fields are valid:
// they mean the defaults (and no rate bound).
func (c Config) Validate() error {
	p := confcheck.New(ErrInvalidConfig)
	if c.Batch != 0 {
		p.IntRange("Batch", int64(c.Batch), 1, MaxBatch)
	}
	p.DurationRange("Margin", c.Margin, 0, 0)
	p.DurationRange("Retry", c.Retry, 0, 0)
	p.IntRange("Rate", int64(c.Rate), 0, MaxRate)
	p.DurationRange("ReadyAfter", c.ReadyAfter, 0, 0)
	return p.Err()
}

// withDefaults returns c with the zero fields that mean a default set to
// it.
func (c Config) withDefaults() Config {
	c.Batch = confcheck.Or(c.Batch, DefaultBatch)
	c.Margin = confcheck.Or(c.Margin, DefaultMargin)
	c.Retry = confcheck.Or(c.Retry, DefaultRetry)
	c.Logger = confcheck.Or(c.Logger, hclog.NewNullLogger())
	return c
}
