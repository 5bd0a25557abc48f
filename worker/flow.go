package worker

import (
	"context"
	"errors"
	"time"

	"github.com/hourglass-sched/hourglass/coord"
	"github.com/hourglass-sched/hourglass/internal/backoff"
	"github.com/hourglass-sched/hourglass/internal/shard"
)

// Cluster-wide flow control. A queue with MaxConcurrency or Rate has a
// fetch loop of its own that takes one task at a time: it waits for a
// local slot, pops (blocking until a task is ready), leases the task, and
// starts its delivery, which waits for admission (a semaphore permit,
// then the rate limiter's, QueueOptions.Limiter) and only then calls the
// handler. The loop pops the next task once this one is admitted (or
// settled), so each worker holds at most one task per queue waiting for
// admission.
//
// Admission is taken right before the handler starts, never before the
// wait for a task: a token taken before a blocking pop would be spent when
// the pop began, and a task arriving late in that pop would start close to
// the next token's task, exceeding the rate (#14).

// flowLoop fetches queue q under flow control until ctx ends.
func (w *Worker) flowLoop(ctx context.Context, q *queue, run *runState) {
	rings := newRings()
	var bo backoff.Backoff
	for ctx.Err() == nil {
		// A change of the shard count or of the share makes a new ring:
		// pop the shards that exist now, on this worker's side.
		now, l := w.deps.now(), w.deps.store.Layout()
		ring := ringFor(rings, l, []*queue{q}, []int{0}, w.shareGen.Load(), now)
		ring.wait = popWait([]*queue{q}, []int{0}, l.Existing(), now)
		if q.free() <= 0 || len(ring.keys) == 0 { // no shard of this side's now: the share clock wakes it
			select {
			case <-ctx.Done():
				return
			case <-q.freed:
			}
			continue
		}
		key, entries, sent, err := w.pop(ctx, ring, 1)
		if err != nil {
			if ctx.Err() == nil {
				w.fetchFailed(ctx, &bo, err, q.name)
			}
			continue
		}
		bo.Reset()
		if len(entries) == 0 {
			continue
		}
		pq, sh, ok := w.poppedFrom(key, len(entries))
		if !ok {
			continue
		}
		for _, d := range w.claim(ctx, pq, sh, []string{shard.EntryRef(entries[0])}, sent, run) {
			select {
			case <-ctx.Done():
			case <-d.admitted:
			case <-d.finished:
			}
		}
	}
}

// admit waits for the delivery's admission under its queue's flow
// control: a semaphore permit (blocking until one is released or
// expires), then the rate limiter's admission (sleeping the time the
// limiter names, never polling; for a LeakyBucket also the admitted
// task's wait for its turn), each under the limits in effect when it is
// asked for (limits.go). A failed call is retried after a pause; the
// lease is kept meanwhile by the watchdog. It returns the error to settle the delivery
// with instead of running it when ctx ends first (ErrShuttingDown: the
// worker is stopping, the task goes back).
func (d *delivery) admit(ctx context.Context) error {
	if d.admitted == nil {
		return nil
	}
	q := d.q
	for d.permit.Load() == nil {
		// The change first: a later one ends it, so the loads below are
		// never older than the change watched.
		changed := q.changeNow()
		sem := q.sem.Load()
		if sem == nil {
			break
		}
		start := d.now()
		actx, stop := untilChanged(ctx, changed)
		p, err := sem.TryAcquire(actx)
		if errors.Is(err, coord.ErrNotAcquired) {
			q.met.flowWaits.Inc()
			p, err = sem.Acquire(actx)
		}
		stop()
		if err != nil && ctx.Err() == nil && changed.Err() != nil {
			continue // the limits changed meanwhile: ask the new semaphore
		}
		if err != nil {
			if err := d.flowPause(ctx, err, "semaphore", 0, changed.Done()); err != nil {
				return err
			}
			continue
		}
		q.met.flowWait.Observe(d.now().Sub(start).Seconds())
		q.met.permits.Inc()
		d.permit.Store(&p)
		// The permit follows the delivery's lease from now on.
		if d.lease != q.permitLease {
			q.refreshPermit(&p, d.lease, d.sd.Task.ID)
		}
	}
	for {
		changed := q.changeNow() // first, as above
		lim := q.limit.Load()
		if lim == nil {
			break
		}
		res, err := lim.Allow(ctx)
		if err == nil && res.Allowed {
			// A LeakyBucket admits ahead of the task's turn: it waits
			// for it here, whatever changes meanwhile (the slot is
			// booked; it is not given back if the worker stops).
			if res.Delay > 0 {
				if err := d.flowPause(ctx, nil, "", res.Delay, nil); err != nil {
					return err
				}
			}
			break
		}
		var wait time.Duration
		if err == nil {
			q.met.throttled.Inc()
			wait = max(res.RetryAfter, time.Millisecond)
		}
		if err := d.flowPause(ctx, err, "rate limiter", wait, changed.Done()); err != nil {
			return err
		}
	}
	close(d.admitted)
	return nil
}

// flowPause waits before the next admission attempt: wait after a denied
// one, or (err not nil) a moment after a failed call, which it counts and
// logs; changed (the queue's limits changed: nil for none) ends the wait
// at once. It returns the error to settle the delivery with if the worker
// stops or ctx ends meanwhile.
func (d *delivery) flowPause(ctx context.Context, err error, what string, wait time.Duration, changed <-chan struct{}) error {
	if ctx.Err() != nil {
		return stopCause(ctx)
	}
	if err != nil {
		d.met.fetchErrs.Inc()
		d.log.Warn("flow control: "+what+" failed; retrying", "queue", d.q.name, "error", err)
		wait = 500 * time.Millisecond
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-changed: // the limits changed: ask the new ones now
		return nil
	case <-d.stopping:
		return ErrShuttingDown
	case <-ctx.Done():
		return stopCause(ctx)
	}
}

// leakInterval is the spacing of a LeakyBucket's starts: RatePeriod (or
// its default) over Rate, rounded up to whole µs (the bucket keeps µs:
// rounding down would run faster than Rate, up to twice at 1.5µs).
func leakInterval(o QueueOptions) time.Duration {
	period := o.RatePeriod
	if period == 0 {
		period = DefaultRatePeriod
	}
	d := period / time.Duration(o.Rate)
	if r := d % time.Microsecond; r != 0 && d > time.Microsecond {
		d += time.Microsecond - r
	}
	return d
}

// flowControlled reports whether the queue has a cluster-wide limit.
func (o QueueOptions) flowControlled() bool { return o.MaxConcurrency > 0 || o.Rate > 0 }
