package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/hourglass-sched/hourglass/coord"
	"github.com/hourglass-sched/hourglass/internal/shard"
)

// queue is one consumed queue: its handler and options, its handler
// slots, and its cluster-wide flow control.
type queue struct {
	name string
	h    Handler
	opts QueueOptions // with defaults applied
	log  hclog.Logger
	met  queueMetrics

	// Slots: running counts the slots taken (reserved by a fetch, then
	// held by a delivery until it is settled, except while it is held for
	// its due time without one: see holdWithoutSlot); settling counts acks
	// in flight whose slot was freed early (see settleEarly); holding
	// counts the deliveries held without a slot.
	running  atomic.Int64
	settling atomic.Int64
	holding  atomic.Int64
	// handlers has a place for each handler that may run at once
	// (Concurrency): a delivery takes one before its handler starts. The
	// slots alone do not bound running handlers strictly: a held delivery
	// takes its slot again when due whatever a pop in flight counts on.
	handlers chan struct{}
	// paused is set while the queue is paused cluster-wide (paused.go):
	// it has no free slot, and a delivery popped meanwhile is given back.
	paused atomic.Bool
	// excluded is set while the queue's routing set at run time
	// (inspect.SetRouting) does not admit this worker (paused.go).
	excluded atomic.Bool
	// share is set while the queue's routing has a share (shard.Share):
	// this worker pops only the ready lists of the shards its side of
	// the share takes (a task popped from another is given back before
	// its handler starts). nil: every shard.
	share atomic.Pointer[queueShare]
	// span returns how many shards exist now (the layout's): a share is
	// split over them.
	span func() int
	// keeps is set while the queue keeps records of its ended tasks (a
	// retention registered by the schedulers, read at start and at each
	// event of the control channel: an announcement of registered queues,
	// a confirmation of the subscription): a success is then acknowledged
	// by Store.Succeed, which records it with the handler's result.
	keeps atomic.Bool
	// fair is set while the queue is fair (shard.QueuePolicy.FairWindow,
	// read with keeps): after each pop of its ready list the worker asks
	// for the window to be refilled (refillAsync).
	fair atomic.Bool
	// keyCapped is set while the queue is fair and its keys may be
	// capped (shard.Store.KeyCapped, read with keeps): after each settle
	// of one of its tasks the worker refills the window with the task's
	// key, which a held key at its cap needs to be put back (refillKey).
	keyCapped atomic.Bool
	// refills holds, per shard (int -> *atomic.Int32), whether a refill
	// of the queue's window is in flight (1) and another was asked for
	// meanwhile (2): pops that overlap share refills (refillAsync).
	refills sync.Map
	// freed is signalled when a slot of this queue is freed, anyFreed
	// when a slot of any queue is (both capacity 1).
	freed, anyFreed chan struct{}

	timeoutErr error // cause of a handler's ctx at HandlerTimeout, built once

	// Cluster-wide flow control (limits.go): the semaphore and the rate
	// limiter in effect (nil: none), swapped when the limits set at run
	// time change; lastSem is the latest semaphore there was, which
	// releases and refreshes the permits taken (one key, whatever the
	// cap). conf is what they were built from, and ignored is set while
	// limits set at run time are ignored (both only touched by
	// readControls, and by newQueue before).
	sem         atomic.Pointer[coord.Semaphore]
	lastSem     atomic.Pointer[coord.Semaphore]
	limit       atomic.Pointer[limiterRef]
	changed     atomic.Pointer[change] // ended by the next change (changeNow)
	permitLease time.Duration          // the lease a permit is acquired with
	conf        flowConf
	ignored     bool
}

// defaultPermitLease is a permit's lease between its acquisition and the
// claim that sets it to the delivery's lease.
const defaultPermitLease = 30 * time.Second

// newQueue builds queue name with opts (defaults applied) and its
// flow-control primitives.
func (w *Worker) newQueue(name string, h Handler, opts QueueOptions) (*queue, error) {
	q := &queue{
		name: name, h: h, opts: opts,
		log:        w.deps.log,
		met:        w.deps.met.forQueue(name),
		freed:      make(chan struct{}, 1),
		handlers:   make(chan struct{}, opts.Concurrency),
		anyFreed:   w.freed,
		timeoutErr: fmt.Errorf("handler timeout %s", opts.HandlerTimeout),
		span:       func() int { return w.deps.store.Layout().Existing() },
	}
	// A permit starts with the queue's lease (or a default) and is set to
	// each delivery's own lease once claimed, unless it has that lease
	// already.
	q.permitLease = opts.Lease
	if q.permitLease == 0 {
		q.permitLease = defaultPermitLease
	}
	if err := q.setFlow(w.rdb, w.deps.store.Layout().FlowName(name), confOf(opts), false); err != nil {
		return nil, invalid("queue %q: %w", name, err)
	}
	return q, nil
}

// free returns how many handler slots are free: none while the queue is
// paused, or its routing excludes this worker.
func (q *queue) free() int {
	if q.stopped() {
		return 0
	}
	return q.opts.Concurrency - int(q.running.Load())
}

// stopped reports whether the worker starts none of the queue's tasks:
// it is paused, its routing excludes this worker, or its share leaves
// this worker no shard (paused.go).
func (q *queue) stopped() bool {
	return q.paused.Load() || q.excluded.Load() || q.share.Load() != nil && q.shareless(time.Now())
}

// shareless reports whether this worker's side of the queue's share takes
// no shard at time now (the canary side of a share under one shard,
// outside its part of the period; the other side while the canary holds
// the only shard).
func (q *queue) shareless(now time.Time) bool {
	s := q.share.Load()
	return s != nil && q.span != nil && !s.Any(s.canary, q.span(), now)
}

// queueShare is a queue's share (shard.Share) and this worker's side of
// it.
type queueShare struct {
	shard.Share
	canary bool
}

// showShare sets the share gauge: the percentage of the queue's tasks
// this worker's side of its share takes, 0 without one.
func (q *queue) showShare() {
	if q.met.share == nil {
		return
	}
	s, v := q.share.Load(), 0.0
	switch {
	case s != nil && s.canary:
		v = float64(s.Percent)
	case s != nil:
		v = float64(100 - s.Percent)
	}
	q.met.share.Set(v)
}

// takes reports whether this worker pops shard sh (of n) of the queue at
// time now.
func (q *queue) takes(sh, n int, now time.Time) bool {
	s := q.share.Load()
	return s == nil || s.Takes(q.name, s.canary, sh, n, now)
}

// sliced reports whether the queue's share has a boundary shard (of n)
// that changes hands, and whether this worker holds it at time now.
func (q *queue) sliced(n int, now time.Time) (sliced, holds bool) {
	s := q.share.Load()
	if s == nil {
		return false, false
	}
	full, part := s.Split(n)
	if part == 0 || n <= 0 {
		return false, false
	}
	return true, s.Takes(q.name, s.canary, (s.Start(q.name, n)+full)%n, n, now)
}

// reserve takes n slots for popped entries; each is given back with
// release unless a delivery takes it over.
func (q *queue) reserve(n int) { q.running.Add(int64(n)) }

// release frees n slots and wakes the fetch loops waiting for one.
func (q *queue) release(n int) {
	q.running.Add(int64(-n))
	for _, ch := range []chan struct{}{q.anyFreed, q.freed} {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// holdWithoutSlot gives a delivery's slot back for the time it is held
// until its due time, so that held deliveries do not keep other tasks
// from being popped; false when Concurrency deliveries are held so
// already (the delivery holds in its slot). retakeSlot ends it.
func (q *queue) holdWithoutSlot() bool {
	if !incrBelow(&q.holding, q.opts.Concurrency) {
		return false
	}
	q.release(1)
	return true
}

// retakeSlot takes the slot of a delivery held without one back, at once
// and past Concurrency if it must: the next pops are sized by what is
// left, and startHandler keeps the handlers within the bound.
func (q *queue) retakeSlot() {
	q.running.Add(1)
	q.holding.Add(-1)
}

// startHandler takes a place for a handler to run, waiting up to wait
// for one while Concurrency handlers run (only deliveries that took
// their slot back after a hold make that happen, at most Concurrency of
// them). It returns the error to settle the delivery with if ctx ends
// first, or errNoPlace after wait: a task is not kept from other workers
// longer than a hold, by handlers that run long or hang. endHandler
// gives the place back.
func (q *queue) startHandler(ctx context.Context, wait time.Duration) error {
	select {
	case q.handlers <- struct{}{}:
		return nil
	default:
	}
	q.met.placeWaits.Inc()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case q.handlers <- struct{}{}:
		return nil
	case <-t.C:
		return errNoPlace
	case <-ctx.Done():
		return stopCause(ctx)
	}
}

// endHandler gives back the place startHandler took.
func (q *queue) endHandler() { <-q.handlers }

// settleEarly takes one of the Concurrency places for acks outstanding on
// slots freed before the ack landed; false when all are taken. It never
// counts past the bound, even for a moment.
func (q *queue) settleEarly() bool { return incrBelow(&q.settling, q.opts.Concurrency) }

// incrBelow adds one to c unless it is at bound already, and reports
// whether it did; c never counts past bound, even for a moment.
func incrBelow(c *atomic.Int64, bound int) bool {
	for v := c.Load(); v < int64(bound); v = c.Load() {
		if c.CompareAndSwap(v, v+1) {
			return true
		}
	}
	return false
}

// releasePermit gives a semaphore permit back (nil: nothing to do).
func (q *queue) releasePermit(p *coord.Permit) {
	if p == nil {
		return
	}
	q.met.permits.Dec()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := q.lastSem.Load().Release(ctx, *p); err != nil && !errors.Is(err, coord.ErrNotHeld) {
		// It expires with its lease.
		q.log.Warn("could not release a concurrency permit; it expires with its lease", "queue", q.name, "error", err)
	}
}

// refreshPermit sets permit p to expire after lease, as its delivery's
// lease does.
func (q *queue) refreshPermit(p *coord.Permit, lease time.Duration, task string) {
	if p == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := q.lastSem.Load().Refresh(ctx, *p, lease); err != nil {
		q.log.Warn("could not refresh a concurrency permit", "task", task, "queue", q.name, "error", err)
	}
}
