package worker

import (
	"context"

	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/backoff"
	"github.com/hourglass-sched/hourglass/internal/shard"
)

// popBatchMax bounds the ids one fetch pops (and one claim leases): a
// smaller batch is claimed sooner, so its handlers start while the next
// batch is popped and claimed.
const popBatchMax = 64

// fetch runs the fetch loops until ctx ends. Queues under cluster-wide
// flow control each get their own loop (flow.go); the others share one.
func (w *Worker) fetch(ctx context.Context, queues []*queue, run *runState) {
	w.popper = w.blocking
	defer w.blocking.close()
	if cc, ok := w.rdb.(*redis.ClusterClient); ok {
		names := make([]string, len(queues))
		for i, q := range queues {
			names[i] = q.name
		}
		cp := newClusterPopper(ctx, cc, w.deps.store, w.deps.log, w.deps.store.Layout().ReadyKeys(names))
		defer cp.close()
		w.popper = cp
	}
	var plain []*queue
	var loops sync.WaitGroup
	loops.Add(1)
	go func() { defer loops.Done(); w.shareClock(ctx, queues) }()
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
	// One key ring per set of queues (almost always all of them), built
	// once, and anew after a change of the shard count or of a share.
	rings := newRings()
	var bo backoff.Backoff
	for ctx.Err() == nil {
		if idx, count := pickQueues(queues, inFlight); len(idx) > 0 {
			// A ring is used only by the next pop for the same set, which
			// cannot start before this one is done.
			now, l := w.deps.now(), w.deps.store.Layout()
			ring := ringFor(rings, l, queues, idx, w.shareGen.Load(), now)
			// A ring without keys (the queues' sides of their shares hold
			// no shard at this moment) pops nothing: the share clock wakes
			// the loop when that changes.
			if len(ring.keys) > 0 {
				ring.wait = popWait(queues, idx, l.Existing(), now)
				for _, i := range idx {
					inFlight[i] = true
				}
				pops.Add(1)
				go func() {
					defer pops.Done()
					done <- popped{idx, w.popClaim(ctx, ring, min(count, popBatchMax), run)}
				}()
			}
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
				w.fetchFailed(ctx, &bo, p.err)
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
// Rings are keyed by the exact set of queues (a bitset over their
// indexes), so two sets never share a ring and a ring lives as long as
// the fetch loop: its registration for ready announcements
// (clusterpop.go) stays valid.
//
// A change of the shard count (the layout's span) makes new rings, with
// the keys of the shards that exist now: the next pop after the store
// adopted the new layout covers them.
func ringFor(rings *ringSet, layout shard.Layout, queues []*queue, idx []int, shareGen uint64, now time.Time) *readyRing {
	span := layout.Existing()
	if rings.span != span || rings.gen != shareGen {
		// The old rings are no longer asked for: only a pop in flight
		// still has one.
		rings.span, rings.gen, rings.by = span, shareGen, map[string]*readyRing{}
	}
	// A share's boundary shard changes hands during its period: a ring
	// for each holder (two at most per set).
	set := make([]byte, 2*((len(queues)+7)/8))
	half := len(set) / 2
	for _, i := range idx {
		set[i/8] |= 1 << (i % 8)
		if sliced, holds := queues[i].sliced(span, now); sliced && holds {
			set[half+i/8] |= 1 << (i % 8)
		}
	}
	r := rings.by[string(set)]
	if r == nil {
		var keys []string
		for sh := range span {
			for _, i := range idx {
				if q := queues[i]; q.takes(sh, span, now) {
					keys = append(keys, layout.Ready(sh, q.name))
				}
			}
		}
		r = &readyRing{keys: keys}
		rings.by[string(set)] = r
		for _, i := range idx {
			queues[i].showShare()
		}
	}
	return r
}

// ringSet holds a fetch loop's rings for one shard count and one
// generation of the shares.
type ringSet struct {
	span int
	gen  uint64
	by   map[string]*readyRing
}

func newRings() *ringSet { return &ringSet{span: -1} }

// readyRing hands out a fixed set of ready-list keys, rotated by one more
// on each call so that no shard's list always comes first. The slice it
// returns is reused by the next call. One pop at a time uses a ring.
type readyRing struct {
	keys []string // in shard order
	buf  []string
	next int
	// wait, when set, bounds the next pop's wait below FetchTimeout:
	// until a share's boundary shard changes hands (popWait), so that a
	// pop that no interrupt reached (a Redis Cluster's, or one sent just
	// after the interrupt) ends within a second of the change.
	wait time.Duration
	// wake is set by the cluster popper on first use: it receives a
	// signal when one of keys is announced (clusterpop.go), and hint is
	// the key last announced, popped first next time.
	wake chan struct{}
	hint atomic.Pointer[string]
}

func (r *readyRing) rotated() []string {
	if len(r.keys) == 0 {
		return nil // no shard of this worker's (its queues are stopped)
	}
	r.next = (r.next + 1) % len(r.keys)
	r.buf = append(append(r.buf[:0], r.keys[r.next:]...), r.keys[:r.next]...)
	return r.buf
}

// popClaim pops at most count ids from ring's keys and claims them in the
// background; the error is the pop's.
func (w *Worker) popClaim(ctx context.Context, ring *readyRing, count int, run *runState) error {
	key, entries, sent, err := w.pop(ctx, ring, count)
	if len(entries) > 0 {
		w.claimAsync(ctx, key, entries, sent, run)
	}
	return err
}

// pop pops at most count entries from ring's keys; sent is when the pop
// was sent, the earliest the entries may have left their list (the reply
// may be read much later: the pop blocked, or the process was paused).
func (w *Worker) pop(ctx context.Context, ring *readyRing, count int) (key string, entries []string, sent time.Time, err error) {
	sent = w.deps.now()
	timeout := w.cfg.FetchTimeout
	if ring.wait > 0 {
		timeout = min(timeout, ring.wait)
	}
	key, entries, err = w.popper.pop(ctx, ring, count, timeout)
	if err != nil || len(entries) == 0 {
		return "", nil, sent, err
	}
	if faultAfterPop != nil {
		faultAfterPop()
	}
	// afterPop is a test hook: false means the worker "crashed" between
	// pop and lease.
	if w.afterPop != nil && !w.afterPop(entries) {
		return "", nil, sent, nil
	}
	return key, entries, sent, nil
}

// fetchFailed counts and logs a failed fetch, then waits out the backoff
// before the loop tries again (both fetch loops retry this way).
func (w *Worker) fetchFailed(ctx context.Context, bo *backoff.Backoff, err error, queue ...string) {
	w.deps.met.fetchErrs.Inc()
	w.deps.log.Warn("fetch failed; retrying", "queue", queue, "error", err)
	bo.Wait(ctx)
}

// popWait returns how long a pop for the queues at idx may wait at time
// now before a share's boundary shard (of n) changes hands, rounded up to
// whole seconds (a blocking pop's unit), at least one; 0 when none of
// them has one.
func popWait(queues []*queue, idx []int, n int, now time.Time) time.Duration {
	var wait time.Duration
	for _, i := range idx {
		s := queues[i].share.Load()
		if s == nil {
			continue
		}
		if at := s.NextChange(n, now); !at.IsZero() {
			d := max((at.Sub(now) + time.Second - 1).Truncate(time.Second), time.Second)
			if wait == 0 || d < wait {
				wait = d
			}
		}
	}
	return wait
}
