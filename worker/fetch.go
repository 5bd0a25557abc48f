package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/hourglass-sched/hourglass/coord"
	"github.com/hourglass-sched/hourglass/internal/backoff"
	"github.com/hourglass-sched/hourglass/internal/shard"
)

// popBatchMax bounds the ids one fetch pops (and one claim leases): a
// smaller batch is claimed sooner, so its handlers start while the next
// batch is popped and claimed.
const popBatchMax = 64

// fetch runs the fetch loops until ctx ends. Queues under cluster-wide
// flow control each get their own loop (it must hold a permit and a token
// before popping); the others share one.
func (w *Worker) fetch(ctx context.Context, queues []*queue, run *runState) {
	var plain []*queue
	var loops sync.WaitGroup
	for _, q := range queues {
		if !q.opts.flowControlled() {
			plain = append(plain, q)
			continue
		}
		loops.Add(1)
		go func() { defer loops.Done(); w.flowLoop(ctx, q, run) }()
	}
	if len(plain) > 0 {
		w.fetchLoop(ctx, plain, run)
	}
	loops.Wait()
}

// fetchLoop pops and claims tasks for queues with free handler slots
// until ctx ends. One blocking pop covers every queue with free slots;
// when a slot of a queue that pop does not cover is freed (the queue was
// full when the pop was sent), a second pop for that queue goes out at
// once instead of waiting for the first to time out. Pops in flight never
// cover the same queue, so each queue's free slots bound what is popped
// for it.
func (w *Worker) fetchLoop(ctx context.Context, queues []*queue, run *runState) {
	type popped struct {
		covered []int // indexes into queues
		err     error
	}
	done := make(chan popped, len(queues)) // never blocks a pop's goroutine
	var pops sync.WaitGroup
	defer pops.Wait()
	inFlight := make([]bool, len(queues))
	// One key ring per set of queues (a bit mask over their indexes;
	// almost always all of them), built once.
	rings := map[uint64]*readyRing{}
	var bo backoff.Backoff
	for ctx.Err() == nil {
		if idx, count := pickQueues(queues, inFlight); len(idx) > 0 {
			// The ring's slice is reused only by the next pop for the same
			// set, which cannot start before this one is done.
			keys := ringFor(rings, w.deps.store.Layout(), queues, idx).rotated()
			for _, i := range idx {
				inFlight[i] = true
			}
			pops.Add(1)
			go func() {
				defer pops.Done()
				done <- popped{idx, w.popClaim(ctx, keys, min(count, popBatchMax), nil, nil, run)}
			}()
		}
		select {
		case <-ctx.Done():
			return
		case <-w.freed:
		case p := <-done:
			for _, i := range p.covered {
				inFlight[i] = false
			}
			switch {
			case p.err == nil:
				bo.Reset()
			case ctx.Err() == nil:
				w.deps.met.fetchErrs.Inc()
				w.deps.log.Warn("fetch failed; retrying", "error", p.err)
				bo.Wait(ctx)
			}
		}
	}
}

// pickQueues returns the indexes of the queues with free slots that no
// pop in flight covers, and the fewest free slots among them.
func pickQueues(queues []*queue, inFlight []bool) (idx []int, count int) {
	for i, q := range queues {
		if f := q.free(); f > 0 && !inFlight[i] {
			idx = append(idx, i)
			if count == 0 || f < count {
				count = f
			}
		}
	}
	return idx, count
}

// ringFor returns the key ring of the queues at idx, built on first use.
func ringFor(rings map[uint64]*readyRing, layout shard.Layout, queues []*queue, idx []int) *readyRing {
	var mask uint64
	for _, i := range idx {
		mask |= 1 << (i % 64)
	}
	r := rings[mask]
	if r == nil || len(queues) > 64 { // beyond 64 queues masks collide: rebuild
		names := make([]string, 0, len(idx))
		for _, i := range idx {
			names = append(names, queues[i].name)
		}
		r = &readyRing{keys: layout.ReadyKeys(names)}
		rings[mask] = r
	}
	return r
}

// readyRing hands out a fixed set of ready-list keys, rotated by one more
// on each call so that no shard's list always comes first. The slice it
// returns is reused by the next call.
type readyRing struct {
	keys []string // in shard order
	buf  []string
	next int
}

func (r *readyRing) rotated() []string {
	r.next = (r.next + 1) % len(r.keys)
	r.buf = append(append(r.buf[:0], r.keys[r.next:]...), r.keys[:r.next]...)
	return r.buf
}

// popClaim pops at most count ids from keys and claims them in the
// background, with permit if the queue q is under flow control. When
// nothing was popped (or the test hook dropped it) the permit is given
// back; the error is the pop's.
func (w *Worker) popClaim(ctx context.Context, keys []string, count int, permit *coord.Permit, q *queue, run *runState) error {
	key, ids, err := w.deps.store.Pop(ctx, keys, count, w.cfg.FetchTimeout)
	// afterPop is a test hook: false means the worker "crashed" between
	// pop and lease.
	if err == nil && len(ids) > 0 && (w.afterPop == nil || w.afterPop(ids)) {
		w.claimAsync(ctx, key, ids, permit, run)
		return nil
	}
	if q != nil {
		q.releasePermit(permit)
	}
	return err
}

// flowLoop fetches one queue under cluster-wide flow control, one task at
// a time: wait for a local slot, then admission (a rate token and a
// semaphore permit), and only then pop and claim.
func (w *Worker) flowLoop(ctx context.Context, q *queue, run *runState) {
	ring := &readyRing{keys: w.deps.store.Layout().ReadyKeys([]string{q.name})}
	for ctx.Err() == nil {
		if q.free() <= 0 {
			select {
			case <-ctx.Done():
				return
			case <-q.freed:
			}
			continue
		}
		permit, ok := w.admit(ctx, q)
		if !ok {
			continue
		}
		if err := w.popClaim(ctx, ring.rotated(), 1, permit, q, run); err != nil && ctx.Err() == nil {
			w.flowRetry(ctx, q, err, "fetch")
		}
	}
}

// admit takes a rate token (sleeping the time the limiter names, never
// polling), then a semaphore permit (blocking until one is released or
// expires). It reports false when the caller must start over: ctx ended,
// the rate limit holds the fetch back, or a call failed (and was waited
// out). The permit is nil for a queue without MaxConcurrency.
func (w *Worker) admit(ctx context.Context, q *queue) (*coord.Permit, bool) {
	if q.limit != nil {
		res, err := q.limit.Allow(ctx)
		if err != nil {
			if ctx.Err() == nil {
				w.flowRetry(ctx, q, err, "rate limiter")
			}
			return nil, false
		}
		if !res.Allowed {
			q.met.throttled.Inc()
			select {
			case <-ctx.Done():
			case <-time.After(max(res.RetryAfter, time.Millisecond)):
			}
			return nil, false
		}
	}
	if q.sem == nil {
		return nil, true
	}
	start := time.Now()
	p, err := q.sem.TryAcquire(ctx)
	if errors.Is(err, coord.ErrNotAcquired) {
		q.met.flowWaits.Inc()
		p, err = q.sem.Acquire(ctx)
	}
	if err != nil {
		if ctx.Err() == nil {
			w.flowRetry(ctx, q, err, "semaphore")
		}
		return nil, false
	}
	q.met.flowWait.Observe(time.Since(start).Seconds())
	q.met.permits.Inc()
	return &p, true
}

// flowRetry counts and logs a failed flow-control or fetch call, then
// waits a moment before the loop tries again.
func (w *Worker) flowRetry(ctx context.Context, q *queue, err error, what string) {
	w.deps.met.fetchErrs.Inc()
	w.deps.log.Warn("flow control: "+what+" failed; retrying", "queue", q.name, "error", err)
	select {
	case <-ctx.Done():
	case <-time.After(500 * time.Millisecond):
	}
}
