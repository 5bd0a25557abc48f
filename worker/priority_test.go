package worker

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestLowPriorityStartsUnderHighLoad: a stream of high-priority tasks of
// one key that never runs dry saturates a worker (each high task enqueues
// the next); low tasks enqueued behind 100 high ones still start, the
// n-th within the window, the worker's slots and 21·n of the key's
// starts (docs/fairness.md, "Priorities"), where due order (FIFO) or
// strict priority would start them after every high task.
func TestLowPriorityStartsUnderHighLoad(t *testing.T) {
	t.Parallel()
	p := shardtest.Policy()
	p.FairWindow = 4
	e := newEnv(t, p)
	placeByKey(t, e)
	ctx := testenv.Ctx(t, time.Minute)
	enqueue := func(prio hourglass.Priority, ids ...string) {
		t.Helper()
		args := make([]shard.EnqueueArgs, len(ids))
		for i, id := range ids {
			args[i] = shard.EnqueueArgs{ID: id, Queue: "q", MaxRetries: -1, Priority: prio}
		}
		for i, r := range e.Store.EnqueueBatch(ctx, args) {
			if r.Err != nil {
				t.Errorf("enqueue %s: %v", ids[i], r.Err)
			}
		}
	}
	var high []string
	for i := range 100 {
		high = append(high, fmt.Sprintf("{k}h%03d", i))
	}
	enqueue(hourglass.PriorityHigh, high...)
	lows := []string{"{k}low1", "{k}low2", "{k}low3"}
	enqueue(hourglass.PriorityLow, lows...)
	testenv.WaitFor(t, 20*time.Second, "the low tasks moved to their key's list", func() (bool, string) {
		for _, id := range lows {
			if info, err := e.Store.Lookup(ctx, id); err != nil || info.State != "ready" {
				return false, fmt.Sprintf("%s: %+v %v", id, info.State, err)
			}
		}
		return true, ""
	})

	var mu sync.Mutex
	var order []string
	next := 0
	const slots = 4
	h := func(ctx context.Context, task *Task) error {
		mu.Lock()
		order = append(order, task.ID)
		next++
		n := next
		mu.Unlock()
		if task.Priority == hourglass.PriorityHigh {
			enqueue(hourglass.PriorityHigh, fmt.Sprintf("{k}more%05d", n)) // the stream never runs dry
		}
		time.Sleep(2 * time.Millisecond) // the work
		return nil
	}
	e.start(e.RDB, QueueOptions{Concurrency: slots}, h)
	testenv.WaitFor(t, 40*time.Second, "every low task started", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range lows {
			if !slices.Contains(order, id) {
				return false, fmt.Sprintf("%d started", len(order))
			}
		}
		return true, ""
	})
	mu.Lock()
	defer mu.Unlock()
	for n, id := range lows {
		at := slices.Index(order, id)
		bound := p.FairWindow + slots + 21*(n+1)
		t.Logf("%s started %dth (bound %d)", id, at+1, bound)
		if at+1 > bound {
			t.Errorf("%s started %dth, want within %d (window %d + %d slots + 21·%d); order %v", id, at+1, bound, p.FairWindow, slots, n+1, order)
		}
	}
	// Saturated: most of the starts before the last low one were high.
	last := slices.Index(order, lows[len(lows)-1])
	highs := 0
	for _, id := range order[:last] {
		if id[3] == 'h' || id[3] == 'm' {
			highs++
		}
	}
	if highs*10 < last*8 {
		t.Errorf("%d of the %d starts before the last low task were high: the high level did not saturate the worker", highs, last)
	}
}
