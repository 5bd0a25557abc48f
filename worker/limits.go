package worker

import (
	"context"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/coord"
	"github.com/hourglass-sched/hourglass/internal/shard"
)

// Limits set at run time (inspect.SetQueueLimits, hourglass queue
// limit): stored beside the paused queues and announced on the control
// channel, they replace the cluster-wide flow control of a queue that
// this worker consumes under flow control (QueueOptions.MaxConcurrency
// or Rate set: such a queue has a fetch loop of its own, flow.go), until
// they are cleared. The semaphore and the limiter are swapped between
// two admissions; permits already taken stay valid, and are released and
// refreshed under the queue's one semaphore key. A queue without flow
// control in this worker ignores them (logged).

// flowConf is the cluster-wide flow control of a queue, defaults
// applied: from its QueueOptions or from limits set at run time.
type flowConf struct {
	MaxConcurrency int
	Rate           int
	RatePeriod     time.Duration
	Burst          int
	Limiter        LimiterKind
}

// limiterRef holds a coord.Limiter for an atomic.Pointer.
type limiterRef struct{ coord.Limiter }

// confOf returns the flow control of o (defaults applied).
func confOf(o QueueOptions) flowConf {
	o = o.withDefaults()
	return flowConf{MaxConcurrency: o.MaxConcurrency, Rate: o.Rate, RatePeriod: o.RatePeriod, Burst: o.Burst, Limiter: o.Limiter}
}

// confOfLimits returns the flow control limits set at run time ask for,
// as QueueOptions with those fields would.
func confOfLimits(l shard.QueueLimits) flowConf {
	return confOf(QueueOptions{MaxConcurrency: l.MaxConcurrency, Rate: l.Rate, RatePeriod: l.Period, Burst: l.Burst, Limiter: LimiterKind(l.Kind)})
}

// setFlow builds c's semaphore and rate limiter, named flow, and puts
// them in place of the queue's. The limiter of limits set at run time
// (runTime) is named for c as well: a token or leaky bucket keeps its
// next free time in its key, and a faster bucket reading a slower one's
// would admit nothing until that time, so each set of limits starts a
// fresh bucket of its own, shared by the workers that apply the same
// limits. The semaphore keeps its name: its permits are counted across
// changes.
func (q *queue) setFlow(rdb redis.UniversalClient, flow string, c flowConf, runTime bool) error {
	var sem *coord.Semaphore
	if c.MaxConcurrency > 0 {
		var err error
		if sem, err = coord.NewSemaphore(rdb, flow, c.MaxConcurrency, q.permitLease); err != nil {
			return err
		}
	}
	var lim *limiterRef
	if c.Rate > 0 {
		name := flow
		if runTime {
			h := fnv.New32a()
			fmt.Fprintf(h, "%+v", c)
			name = fmt.Sprintf("%s#%08x", flow, h.Sum32())
		}
		l, err := newLimiter(rdb, name, c)
		if err != nil {
			return err
		}
		lim = &limiterRef{l}
	}
	q.sem.Store(sem)
	if sem != nil {
		q.lastSem.Store(sem)
	}
	q.limit.Store(lim)
	q.conf = c
	// Admissions waiting under the old limits ask the new ones.
	next, cancel := context.WithCancel(context.Background())
	if old := q.changed.Swap(&change{next, cancel}); old != nil {
		old.cancel()
	}
	return nil
}

// change is ended by the next change of a queue's limits.
type change struct {
	context.Context
	cancel context.CancelFunc
}

// changeNow returns what the next change of the queue's limits ends.
func (q *queue) changeNow() change { return *q.changed.Load() }

// untilChanged returns ctx, also cancelled when c ends, and its stop,
// which must be called. It starts no goroutine (context.AfterFunc).
func untilChanged(ctx context.Context, c change) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	unhook := context.AfterFunc(c, cancel)
	return ctx, func() { unhook(); cancel() }
}

// newLimiter returns the coord limiter named flow that holds c.Rate by
// c.Limiter.
func newLimiter(rdb redis.UniversalClient, flow string, c flowConf) (coord.Limiter, error) {
	switch c.Limiter {
	case SlidingWindow:
		return coord.NewSlidingWindow(rdb, flow, c.Rate, c.RatePeriod)
	case FixedWindow:
		return coord.NewFixedWindow(rdb, flow, c.Rate, c.RatePeriod)
	case LeakyBucket:
		return coord.NewLeakyBucket(rdb, flow, leakInterval(QueueOptions{Rate: c.Rate, RatePeriod: c.RatePeriod}), c.Burst)
	default:
		return coord.NewTokenBucket(rdb, flow, c.Rate, c.RatePeriod, c.Burst)
	}
}

// applyLimits puts in place the flow control that limits set at run time
// (l, when set) or, without them, the queue's options ask for.
func (w *Worker) applyLimits(q *queue, l shard.QueueLimits, set bool) {
	want := confOf(q.opts)
	if set {
		want = confOfLimits(l)
	}
	if !q.opts.flowControlled() {
		if set && !q.ignored {
			w.deps.log.Warn("limits set at run time are ignored: this worker consumes the queue without flow control (set max_concurrency or rate_limit in its configuration)", "queue", q.name)
		}
		q.ignored = set
		return
	}
	if want == q.conf {
		return
	}
	if err := q.setFlow(w.rdb, w.deps.store.Layout().FlowName(q.name), want, set); err != nil {
		w.deps.log.Warn("could not apply the queue's limits; keeping the current ones", "queue", q.name, "error", err)
		return
	}
	w.deps.log.Info("queue limits changed", "queue", q.name, "set_at_run_time", set, "limits", fmt.Sprintf("%+v", want))
}
