package scan

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestCombinerSendsOverlappingCallsTogether: calls made while one is in
// flight (Redis paused under it) wait, then go to Redis as one batch;
// each shard gets its own outcome, a stale epoch failing its shard alone.
func TestCombinerSendsOverlappingCallsTogether(t *testing.T) {
	t.Parallel()
	const shards = 8
	e := shardtest.New(t, shardtest.Options{Namespace: "combine", Shards: shards, Queues: map[string]shard.QueuePolicy{"q": {Timeout: time.Second}}})
	ctx := testenv.Ctx(t, time.Minute)
	for sh := range shards {
		e.Schedule("q", 0, e.IDsIn(sh, sh+1, fmt.Sprintf("s%d-", sh))...) // shard sh has sh+1 due tasks
	}
	// Shard 7's owner is fenced: a newer one stored epoch 9.
	if _, err := e.Store.Move(ctx, shards-1, 9, 1); err != nil {
		t.Fatal(err)
	}
	met := NewMetrics(prometheus.NewRegistry())
	c := newCombiner(e.Store, met)

	type result struct {
		res shard.MoveResult
		err error
	}
	results := make([]result, shards)
	var wg sync.WaitGroup
	call := func(sh int) {
		wg.Go(func() {
			epoch := int64(1)
			if sh == shards-1 {
				epoch = 2 // older than 9
			}
			r, err := c.move(ctx, shard.MoveRequest{Shard: sh, Epoch: epoch, Limit: 100})
			results[sh] = result{r, err}
		})
	}
	e.Redis.Pause()
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			e.Redis.Resume()
		}
	})
	call(0) // in flight until Redis runs again
	testenv.WaitFor(t, 10*time.Second, "shard 0's call in flight", func() (bool, string) {
		return !c.Idle(), "not sent yet"
	})
	for sh := 1; sh < shards; sh++ {
		call(sh)
	}
	testenv.WaitFor(t, 10*time.Second, "the other calls waiting", func() (bool, string) {
		n := c.Waiting()
		return n == shards-1, fmt.Sprintf("%d waiting", n)
	})
	e.Redis.Resume()
	resumed = true
	wg.Wait()

	for sh, r := range results {
		switch {
		case sh == shards-1:
			if !errors.Is(r.err, shard.ErrStaleEpoch) {
				t.Errorf("shard %d (stale epoch): %+v, %v; want ErrStaleEpoch", sh, r.res, r.err)
			}
		case r.err != nil || r.res.Moved != sh+1 || r.res.NextDue != -1:
			t.Errorf("shard %d: %+v, %v; want its %d due tasks moved", sh, r.res, r.err, sh+1)
		}
		if sh < shards-1 {
			if n := e.ReadyLen(sh, "q"); n != int64(sh+1) {
				t.Errorf("shard %d: %d ready, want %d", sh, n, sh+1)
			}
		}
	}
	if n := e.ReadyLen(shards-1, "q"); n != 1 {
		t.Errorf("stale shard %d: %d ready, want only the newer owner's 1", shards-1, n)
	}
	// Two round trips: shard 0 alone, then the seven that waited.
	var m dto.Metric
	if err := met.shared.Write(&m); err != nil {
		t.Fatal(err)
	}
	if h := m.GetHistogram(); h.GetSampleCount() != 2 || h.GetSampleSum() != shards {
		t.Errorf("shards per call: %d round trips carrying %v shards, want 2 carrying %d", h.GetSampleCount(), h.GetSampleSum(), shards)
	}
	if !c.Idle() {
		t.Error("combiner busy after the calls")
	}
}

// TestCombinerCallAloneAfterBatch: once the calls have returned, a new
// call goes at once, alone (nothing waits for a batch to form).
func TestCombinerCallAloneAfterBatch(t *testing.T) {
	t.Parallel()
	e := shardtest.New(t, shardtest.Options{Namespace: "alone", Queues: map[string]shard.QueuePolicy{"q": {Timeout: time.Second}}})
	ctx := testenv.Ctx(t, time.Minute)
	c := newCombiner(e.Store, nil)
	for i := range 3 {
		e.Schedule("q", 0, e.IDsIn(1, 1, fmt.Sprintf("a%d-", i))...)
		r, err := c.move(ctx, shard.MoveRequest{Shard: 1, Epoch: 1, Limit: 10})
		if err != nil || r.Moved != 1 {
			t.Fatalf("call %d: %+v, %v; want its task moved", i, r, err)
		}
	}
	// A cancelled ctx fails the call alone and leaves the combiner free.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.move(cctx, shard.MoveRequest{Shard: 1, Epoch: 1, Limit: 10}); !errors.Is(err, context.Canceled) {
		t.Errorf("call with a cancelled ctx: %v", err)
	}
	if r, err := c.move(ctx, shard.MoveRequest{Shard: 1, Epoch: 1, Limit: 10}); err != nil || r.Moved != 0 {
		t.Errorf("call after it: %+v, %v", r, err)
	}
}

// TestShareLimit: a combined call divides each shard's LIMIT among its
// shards, down to minShare, never above the shard's own.
func TestShareLimit(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ limit, n, want int }{
		{512, 2, 256}, {512, 8, 64}, {512, 16, minShare}, {10, 4, 10}, {100, 1, 100},
	} {
		if got := shareLimit(c.limit, c.n); got != c.want {
			t.Errorf("shareLimit(%d, %d) = %d, want %d", c.limit, c.n, got, c.want)
		}
	}
}

// TestBurstBypassesTheCombiner: a mover whose call left tasks due calls
// again on its own, not through the combiner (which sends one batch at a
// time), so that shards drain a burst in parallel: of the calls that
// move 30 due tasks 10 at a time, those after a full batch bypass it.
func TestBurstBypassesTheCombiner(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.Schedule("q", 0, f.IDsIn(0, 30, "b")...)
	f.runMover(t, 0, 1, Config{Limit: 10, SafetyRecheck: time.Hour})
	testenv.WaitFor(t, 10*time.Second, "all 30 tasks moved", func() (bool, string) {
		return f.readyLen(0) == 30, fmt.Sprintf("ready=%d", f.readyLen(0))
	})
	var calls, combined dto.Metric
	testenv.WaitFor(t, 10*time.Second, "the call after the last full batch", func() (bool, string) {
		_ = f.met.batch.Write(&calls)
		return calls.GetHistogram().GetSampleCount() >= 4, fmt.Sprintf("%d calls", calls.GetHistogram().GetSampleCount())
	})
	// The three calls after a full batch (the last one moves nothing)
	// bypass it; the first, and any woken by a wake-up, go through it.
	// A call's shards-per-call sample is taken before its reply and its
	// moved sample after, so the two are compared until they settle.
	testenv.WaitFor(t, 10*time.Second, "the calls after full batches counted as bypassing the combiner", func() (bool, string) {
		_ = f.met.shared.Write(&combined)
		_ = f.met.batch.Write(&calls)
		n, all := combined.GetHistogram().GetSampleCount(), calls.GetHistogram().GetSampleCount()
		return all >= n+3, fmt.Sprintf("%d of %d mover calls went through the combiner", n, all)
	})
}
