package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hourglass-sched/hourglass/internal/shard"
)

// finish settles the delivery once: ack (err nil), release (shutdown),
// or nack. A later call asking for the same outcome gets the first
// result; one asking for another gets ErrAlreadySettled.
func (d *delivery) finish(_ context.Context, err error) error {
	first := false
	d.once.Do(func() {
		first = true
		d.stopWatchdog()
		d.outcome = outcomeFor(err)
		// A successful handler's slot is free once it returned: the ack
		// is bookkeeping, and it goes out in a batch whose round trip the
		// next task need not wait for. At most Concurrency acks may be
		// outstanding this way (a slow Redis holds slots again), and a
		// queue under flow control keeps its slot and permit until the
		// ack landed, so the cluster-wide bound holds.
		early := d.outcome == outcomeAck && d.permit.Load() == nil && d.q.settleEarly()
		if early {
			d.q.release(1)
		}
		// An ack that still holds its slot (or permit) must not linger.
		d.result = d.settle(err, !early)
		d.q.releasePermit(d.permit.Load())
		close(d.finished)
		if early {
			d.q.settling.Add(-1)
		} else {
			d.q.release(1)
		}
	})
	if first && d.q.keyCapped.Load() {
		d.refillKey()
	}
	if !first && d.outcome != outcomeFor(err) {
		return fmt.Errorf("%w: %s", ErrAlreadySettled, d.outcome)
	}
	return d.result
}

// refillKey refills the window of the delivery's fair queue in its shard
// after its settle (shard.Store.FairRefill): an ack or a nack recorded
// gives the task's permit back; otherwise (the task went back to the
// ready list, or the settle was not recorded) the key is only named, and
// the permit ends with the task. A key held at its cap goes back on the
// ring if a permit is free, and its next task enters the window. A refill
// that fails is left to the next settle and the recovery pass, which puts
// held keys back too.
func (d *delivery) refillKey() {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	settled := shard.KeyHint(shard.KeyOf(d.sd.Task.ID))
	if d.result == nil && (d.outcome == outcomeAck || d.outcome == outcomeNack) {
		settled = d.sd.Task.ID
	}
	if _, err := d.store.FairRefill(ctx, d.sd.Shard, d.q.name, settled); err != nil {
		d.log.Warn("could not refill a fair queue's window after a settle; the scheduler will", "queue", d.q.name, "task", d.sd.Task.ID, "error", err)
	}
}

// settle records the outcome in Redis, retrying transient errors for up
// to opTimeout so a short network cut does not cost a lease expiry. An
// ack's first attempt goes without a deadline of its own (a context and
// a timer less per task): the acker bounds each batch by opTimeout; the
// retries after it get one.
func (d *delivery) settle(herr error, urgent bool) error {
	ctx := context.Background()
	if herr != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opTimeout)
		defer cancel()
	}
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		err := d.settleOnce(ctx, herr, urgent)
		if err == nil || errors.Is(err, ErrStaleToken) || ctx.Err() != nil {
			if err != nil && !errors.Is(err, ErrStaleToken) {
				// The lease will expire and recovery will redeliver the task.
				d.q.met.unrecorded.Inc()
				d.log.Error("could not record delivery outcome; the task will be redelivered after its lease",
					"task", d.sd.Task.ID, "queue", d.q.name, "error", err)
			}
			return err
		}
		if ctx.Done() == nil { // an ack's first attempt failed: bound the retries (once)
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, opTimeout)
			defer cancel()
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// settleOnce makes one attempt at recording the outcome: an ack through
// the acker, a release, or a nack.
func (d *delivery) settleOnce(ctx context.Context, herr error, urgent bool) error {
	var err error
	switch {
	case herr == nil && d.q.keeps.Load():
		var out []byte
		if p := d.output.Load(); p != nil {
			out = *p
		}
		sctx, cancel := context.WithTimeout(ctx, opTimeout) // not batched: bounded here
		err = d.store.Succeed(sctx, d.sd.AckArgs(d.unleased.Load()), out)
		cancel()
		if err == nil {
			d.q.met.acks.Inc()
			d.hist.Count(d.q.name, shard.HistSucceeded, 1)
		}
	case herr == nil:
		if err = d.acks.ack(ctx, d.sd.AckArgs(d.unleased.Load()), urgent); err == nil {
			d.q.met.acks.Inc()
			d.hist.Count(d.q.name, shard.HistSucceeded, 1)
		}
	case errors.Is(herr, errDropped):
		d.q.met.dropped.Inc()
		return nil
	case errors.Is(herr, errCancelled):
		d.q.met.cancelled.Inc()
		return nil
	case errors.Is(herr, ErrShuttingDown):
		if err = d.store.Release(ctx, d.sd); err == nil {
			d.q.met.released.Inc()
		}
	default:
		err = d.nack(ctx, herr)
	}
	if errors.Is(err, shard.ErrStaleToken) {
		d.q.met.stale.Inc()
		d.log.Warn("delivery no longer current; its outcome was not recorded", "task", d.sd.Task.ID, "queue", d.q.name)
		return ErrStaleToken
	}
	return err
}

// nack fails the delivery with herr: NoRetry buries the task, RetryAfter
// sets the retry's delay, otherwise the queue's backoff applies. The
// error recorded for a handler's NoRetry(err) is err's text: the dead
// letter's reason says "not retryable" already. (A NoRetry that another
// error wraps keeps the whole text, which says what wrapped it.)
func (d *delivery) nack(ctx context.Context, herr error) error {
	msg := herr.Error()
	if nr, ok := herr.(noRetryError); ok {
		msg = nr.err.Error()
	}
	a := d.sd.NackArgs(d.unleased.Load(), msg)
	a.Backoff = shard.Backoff(d.q.opts.Backoff)
	a.TraceLink = d.failedLink()
	var nr noRetryError
	var ra retryAfterError
	switch {
	case errors.As(herr, &nr):
		a.Dead = true
	case errors.As(herr, &ra):
		a.RetryAfter = max(ra.d, time.Millisecond)
	}
	res, err := d.store.Nack(ctx, a)
	if err != nil {
		return err
	}
	m, id := &d.q.met, d.sd.Task.ID
	m.nacks.Inc()
	if res.Dead {
		m.dead.Inc()
		d.hist.Count(d.q.name, shard.HistDead, 1)
		d.log.Warn("task dead-lettered", "task", id, "queue", d.q.name, "attempts", res.Attempts, "error", herr)
	} else {
		m.retries.Inc()
		d.hist.Count(d.q.name, shard.HistRetried, 1)
		d.log.Debug("task will be retried", "task", id, "queue", d.q.name, "attempts", res.Attempts, "due", res.Due, "error", herr)
	}
	return nil
}
