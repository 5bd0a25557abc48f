package worker

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hourglass-sched/hourglass/coord"
	"github.com/hourglass-sched/hourglass/internal/errtext"
	"github.com/hourglass-sched/hourglass/internal/shard"
)

// delivery is one task handed to this worker: popped and run before a
// lease, or leased first. It depends on its queue and on the worker's
// deps, never on the Worker itself.
type delivery struct {
	*deps
	q     *queue
	sd    shard.Delivery
	task  *Task
	lease time.Duration

	permit atomic.Pointer[coord.Permit] // cluster-wide concurrency permit, once admitted (flow.go)
	// admitted is closed when a delivery of a queue under flow control is
	// admitted (nil for other queues); stopping is closed when the worker
	// starts shutting down.
	admitted    chan struct{}
	stopping    <-chan struct{}
	validUntil  atomic.Int64 // local unix nanos until which the lease surely holds
	extendUntil atomic.Int64 // local unix nanos after which the lease is not extended (0: no limit)
	handlerDone atomic.Bool
	unleased    atomic.Bool // runs on its popped entry; leased at LeaseAfter
	// startAt is when the handler starts: at once, or, for a task moved
	// ahead of its due time (scheduler.prefetch) by at most deps.maxHold,
	// when its server's clock shows that time (holdUntil). Set before
	// the watchdog starts.
	startAt time.Time

	cancel context.CancelCauseFunc
	// cancelled is set when the task was cancelled while this worker had
	// it (runState.cancelTask): its outcome is not recorded.
	cancelled atomic.Bool
	// output is what the handler returned (Task.SetResult), kept with
	// the task's record when its queue keeps records.
	output atomic.Pointer[[]byte]
	// traceLink is the id of this attempt in its trace when tracing is
	// on (trace.go), for the nack of a failed attempt.
	traceLink atomic.Pointer[string]
	// The watchdog is a timer, not a goroutine: a handler that finishes
	// within a third of its lease costs no extension and no goroutine.
	wdMu      sync.Mutex
	wdTimer   *time.Timer
	wdStopped bool
	once      sync.Once
	finished  chan struct{} // closed when acked, nacked or released
	outcome   outcome       // what was recorded (valid once finished is closed)
	result    error
}

// newDelivery prepares sd, claimed with a request sent at sent (for a
// Popped delivery: its pop), to run under queue q.
func newDelivery(k *deps, q *queue, sd shard.Delivery, sent time.Time) *delivery {
	d := &delivery{
		deps: k, q: q, sd: sd,
		lease:    sd.Deadline.Sub(sd.Leased),
		finished: make(chan struct{}),
	}
	// The claim was sent at `sent`; Redis set the deadline to its time of
	// the claim plus the lease, which is no earlier than sent + lease.
	d.validUntil.Store(sent.Add(d.lease).UnixNano())
	d.unleased.Store(sd.Unleased)
	if q.opts.flowControlled() {
		d.admitted = make(chan struct{})
	}
	t := sd.Task
	d.task = &Task{
		ID: t.ID, Queue: t.Queue, Payload: t.Payload, Attempt: t.Attempts + 1,
		MaxRetries: t.MaxRetries, Priority: t.Priority, Due: t.Due, Enqueued: t.Enqueued, d: d,
	}
	q.met.deliveries.Inc()
	return d
}

// run executes the handler under the watchdog, with ctx, whose cancel
// is d.cancel (runState.start), and settles the delivery.
func (d *delivery) run(ctx context.Context) {
	defer d.cancel(nil)
	d.startAt = d.holdUntil(ctx)
	// The watchdog keeps a lease (or takes the late one) from now on, also
	// while a task moved ahead of its due time waits for it.
	d.startWatchdog()
	held, err := d.hold(ctx)
	if err == nil {
		err = d.admit(ctx)
	}
	if err == nil {
		err = d.begin(ctx)
	}
	if err != nil {
		if d.cancelled.Load() {
			err = errCancelled // cancelled while held or waiting: nothing to record
		}
		_ = d.finish(context.Background(), err)
		return
	}
	if t := d.q.opts.HandlerTimeout; t > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeoutCause(ctx, t, d.q.timeoutErr)
		defer stop()
		// A handler that ignores its ctx keeps the lease only one more
		// lease period: then the lease lapses and recovery takes over.
		d.extendUntil.Store(d.now().Add(t + d.lease).UnixNano())
	}
	if err, open := d.settleWith(ctx, d.call(ctx, held)); open {
		_ = d.finish(context.Background(), err)
	}
}

// begin takes a place for the handler (queue.startHandler), waiting at
// most maxHold for one, then makes the checks that must come right
// before the handler starts: the lease of a task popped long ago, and a
// pause of the queue. On an error the place is given back and the
// delivery is to be settled with it.
func (d *delivery) begin(ctx context.Context) error {
	if err := d.q.startHandler(ctx, d.maxHold); err != nil {
		return err
	}
	err := d.leaseIfStale()
	// The share is judged at the pop (a task held past the moment its
	// shard changed hands was this side's when popped).
	if err == nil && (d.q.stopped() || d.q.share.Load() != nil && !d.q.takes(d.sd.Shard, d.store.Layout().Existing(), d.poppedAt())) {
		err = errPaused // popped as the queue was paused, this worker excluded or its share changed: give it back
	}
	if err != nil {
		d.q.endHandler()
	}
	return err
}

// call runs the handler, recording its lateness, duration and end, and
// returns its result; a panic is logged with its stack and becomes an
// error (a failed attempt, retried or dead-lettered as any other). held
// reports that the task was held until its due time.
func (d *delivery) call(ctx context.Context, held bool) (err error) {
	m := &d.q.met
	// Lateness: claim time - due on Redis's clock for a task leased
	// first; now on the local clock - due for a task run before its lease
	// (its pop time is when the pop was sent, before the task was there),
	// held until its due time, or admitted by flow control after its
	// claim.
	late := d.sd.Leased.Sub(d.sd.Task.Due)
	if held || d.admitted != nil || d.sd.Unleased {
		late = d.now().Sub(d.sd.Task.Due)
	}
	m.lateness.Observe(max(late, 0).Seconds())
	d.hist.Started(d.q.name, late)
	if d.tracer != nil {
		var end func(error)
		ctx, end = d.startTrace(ctx, late)
		defer func() { end(err) }() // after the recover below
	}
	m.running.Inc()
	start := d.now()
	defer func() {
		if p := recover(); p != nil {
			// The stack is the panicking goroutine's, taken before the
			// deferred call returns: it names the handler's frames. It
			// goes to the log only; the task's last error stays short.
			d.log.Error("handler panicked; the attempt fails as if it returned an error",
				"task", d.sd.Task.ID, "queue", d.q.name, "attempt", d.task.Attempt, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			err = fmt.Errorf("handler panic: %v", p)
		}
		m.duration.Observe(d.now().Sub(start).Seconds())
		m.running.Dec()
		d.q.endHandler()
		d.handlerDone.Store(true)
	}()
	return d.q.h(ctx, d.task)
}

// settleWith turns the handler's result into the error to settle the
// delivery with (nil: ack); open is false when the delivery was settled
// meanwhile. A manual-ack delivery whose handler returned nil stays open
// until the handler's side calls Ack or Nack; a lost lease, a handler
// timeout or the end of the shutdown grace settles it here.
func (d *delivery) settleWith(ctx context.Context, err error) (_ error, open bool) {
	switch {
	case err == nil && d.q.opts.ManualAck:
		select {
		case <-d.finished:
			return nil, false // settled by Ack or Nack
		case <-ctx.Done():
			return context.Cause(ctx), true
		}
	case err == nil:
		return nil, true // done, even if shutdown cancelled the ctx meanwhile: ack it
	case d.cancelled.Load():
		return errCancelled, true // its lease was revoked: nothing to record
	case errors.Is(context.Cause(ctx), ErrShuttingDown):
		return ErrShuttingDown, true // interrupted by the end of the shutdown grace: not a failure
	case ctx.Err() != nil && !errors.Is(err, context.Cause(ctx)):
		return fmt.Errorf("%w (%v)", err, context.Cause(ctx)), true
	}
	return err, true
}

// holdUntil returns when the handler may start: now, or, for a task the
// scheduler moved ahead of its due time (scheduler.prefetch), when the
// clock of the Redis server that holds it shows that time (redisClock).
// A start further ahead than any mover moves a task, on Redis's clock
// (the task was put in its ready list by hand), is not waited for. Without
// a reading of Redis's clock it is held the hold limit instead: this
// worker's clock may be behind Redis's, and the task, staged up to
// shard.MaxStage ahead, is then due no later than that (never early);
// waiting out the whole skew would delay it by the skew.
func (d *delivery) holdUntil(ctx context.Context) time.Time {
	at := d.clock.startAt(ctx, d.sd.Shard, d.sd.Task.Due)
	now := d.now()
	switch ahead := at.Sub(now); {
	case ahead <= 0:
		return now
	case ahead <= d.maxHold:
		return at
	}
	d.q.met.clockBehind.Inc()
	if !d.clock.hasReading(d.sd.Shard) {
		return now.Add(d.maxHold)
	}
	return now
}

// hold waits until startAt if the scheduler moved the task ahead of its
// due time (scheduler.prefetch); it reports whether it waited. If ctx
// ends first (the shutdown grace ran out, or the lease was lost) it
// returns the error to settle the delivery with instead of running it:
// ErrShuttingDown gives the task back.
//
// While it waits, the delivery gives its slot back if it can (queues
// under flow control pop one task at a time and keep it): at high rates
// the tasks held for their due time would otherwise fill the slots and
// keep due tasks in their lists. It takes the slot back when the wait
// ends, ahead of the next pops.
func (d *delivery) hold(ctx context.Context) (bool, error) {
	wait := d.startAt.Sub(d.now())
	if wait <= 0 {
		return false, nil
	}
	d.q.met.held.Inc()
	if d.admitted == nil && d.q.holdWithoutSlot() {
		defer d.q.retakeSlot()
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true, nil
	case <-ctx.Done():
		return true, stopCause(ctx)
	}
}

// stopCause is the error to settle a delivery with whose ctx ended
// before its handler started: ErrShuttingDown gives the task back.
func stopCause(ctx context.Context) error {
	err := context.Cause(ctx)
	if errors.Is(err, ErrShuttingDown) {
		return ErrShuttingDown
	}
	return err
}

// errNoPlace settles a delivery that found no place for its handler in
// time (queue.startHandler): the task is given back for a worker with a
// free one to take (released, no attempt counted).
var errNoPlace = errtext.Errorf("no handler place free in time: %w", ErrShuttingDown)

// errPaused settles a delivery whose queue was paused before its handler
// started: the task is given back (released, no attempt counted).
var errPaused = errtext.Errorf("queue paused: %w", ErrShuttingDown)

// errDropped settles a delivery that is no longer this worker's without
// running it and without telling Redis anything.
var errDropped = errors.New("task no longer pending under its popped entry")

// errCancelled settles a delivery whose task was cancelled while this
// worker had it (runState.cancelTask): nothing is recorded in Redis, where
// the task has ended already.
var errCancelled = errors.New("task cancelled")

// leaseIfStale leases a delivery still unleased whose pop is older than
// shard.MaxLeaseAfter (the worker was paused, or slow, between the pop and
// now), right before its handler would start: recovery may have taken
// the task back and delivered it elsewhere. If the task is no longer
// pending under its popped entry, or the lease cannot be taken, it
// returns errDropped: the handler must not run.
func (d *delivery) leaseIfStale() error {
	if !d.unleased.Load() || d.now().Sub(d.sd.Leased) <= shard.MaxLeaseAfter {
		return nil
	}
	if stale, err := d.takeLease(); stale || err != nil {
		d.log.Warn("popped task no longer ours; dropped without running", "task", d.sd.Task.ID, "queue", d.q.name, "popped", d.now().Sub(d.sd.Leased), "error", err)
		return errDropped
	}
	d.q.met.lateLeases.Inc() // a late lease too (docs/operations.md), taken before the handler starts
	return nil
}

// outcome is how a delivery was settled.
type outcome int

const (
	outcomeAck outcome = iota + 1
	outcomeNack
	outcomeRelease
	outcomeDrop
)

func (o outcome) String() string {
	return [...]string{"", "acked", "nacked", "released", "dropped"}[o]
}

func outcomeFor(err error) outcome {
	switch {
	case err == nil:
		return outcomeAck
	case errors.Is(err, ErrShuttingDown):
		return outcomeRelease
	case errors.Is(err, errDropped), errors.Is(err, errCancelled):
		return outcomeDrop
	default:
		return outcomeNack
	}
}

// poppedAt is about when the task left its ready list: its pop (a task
// run before its lease) or its lease (taken right after the pop); now if
// neither is known.
func (d *delivery) poppedAt() time.Time {
	if !d.sd.Leased.IsZero() {
		return d.sd.Leased
	}
	return d.now()
}
