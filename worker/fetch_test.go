package worker

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// A queue at its concurrency limit gets its next task as soon as a slot
// frees, not when the blocking pop on the worker's other (idle) queues
// times out: eight 10 ms tasks, concurrency 2, drain in a fraction of one
// fetch timeout (before the fix: three fetch timeouts).
func TestFreedSlotFetchesAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardtest.Policy())
	e.Register(map[string]shard.QueuePolicy{"idle": shardtest.Policy()})
	const fetchTimeout = 3 * time.Second
	w, err := New(e.RDB, Config{Namespace: ns, Shards: shards, FetchTimeout: fetchTimeout, ShutdownGrace: time.Second, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var first, last time.Time
	ran := 0
	busy := func(ctx context.Context, task *Task) error {
		start := time.Now()
		time.Sleep(10 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		if first.IsZero() || start.Before(first) {
			first = start
		}
		last = time.Now()
		ran++
		return nil
	}
	if err := w.Handle("q", busy, QueueOptions{Concurrency: 2}); err != nil {
		t.Fatal(err)
	}
	if err := w.Handle("idle", func(context.Context, *Task) error { return nil }, QueueOptions{Concurrency: 1}); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 8)
	for i := range ids {
		ids[i] = fmt.Sprintf("t%d", i)
	}
	e.Ready("q", ids...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testenv.WaitFor(t, 10*fetchTimeout, "8 tasks run", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return ran == 8, fmt.Sprint(ran)
	})
	mu.Lock()
	drain := last.Sub(first)
	mu.Unlock()
	t.Logf("8 tasks of 10ms at concurrency 2 next to an idle queue drained in %v (fetch timeout %v)", drain.Round(time.Millisecond), fetchTimeout)
	if drain >= fetchTimeout {
		t.Errorf("drain took %v: the busy queue waited for the idle queue's pop to time out", drain)
	}
}

// A queue limited to R tasks per second with bursts of B never starts
// more than B + R·t handlers in any window of length t, also when tasks
// arrive after idle periods (a token taken before a blocking pop used to
// be spent when the pop began: the task it admitted late started next to
// the following one).
func TestRateLimitHoldsAfterIdle(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ rate, burst int }{{5, 1}, {2, 3}} {
		t.Run(fmt.Sprintf("%d per s burst %d", c.rate, c.burst), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, shardtest.Policy())
			var mu sync.Mutex
			var starts []time.Time
			e.start(e.RDB, QueueOptions{Concurrency: 4, Rate: c.rate, Burst: c.burst}, func(context.Context, *Task) error {
				mu.Lock()
				starts = append(starts, time.Now())
				mu.Unlock()
				return nil
			})
			// Idle gaps of less than, about and more than one fetch
			// timeout (1 s) and one token, each followed by a busy spell.
			n := 0
			for _, idle := range []time.Duration{300 * time.Millisecond, 700 * time.Millisecond, 1300 * time.Millisecond} {
				time.Sleep(idle)
				ids := make([]string, c.burst+2)
				for i := range ids {
					ids[i] = fmt.Sprintf("t%d", n)
					n++
				}
				e.Schedule("q", 0, ids...)
				testenv.WaitFor(t, 30*time.Second, "busy spell run", func() (bool, string) {
					mu.Lock()
					defer mu.Unlock()
					return len(starts) == n, fmt.Sprint(len(starts))
				})
			}
			mu.Lock()
			defer mu.Unlock()
			worst := checkRate(t, starts, c.rate, c.burst)
			t.Logf("%d starts at %d/s burst %d: worst window held %.2f of its allowance", len(starts), c.rate, c.burst, worst)
		})
	}
}

// checkRate fails t if some window [starts[i], starts[j]] holds more
// than burst + rate·(its length + slack) starts, slack being the
// scheduling delay allowed between a token and its handler's start:
// 0.8 of a token's interval. The window's first handler may start that
// late (a loaded CI machine delayed one by 102 ms at 2/s), while one
// start too many within a few ms (a stale token's task next to the
// following one) still exceeds the allowance by about 0.2. It returns the largest count / allowance
// seen.
func checkRate(t *testing.T, starts []time.Time, rate, burst int) float64 {
	t.Helper()
	slack := time.Duration(float64(time.Second) * 0.8 / float64(rate))
	worst := 0.0
	for i := range starts {
		for j := i; j < len(starts); j++ {
			span := starts[j].Sub(starts[i])
			allowed := float64(burst) + float64(rate)*(span+slack).Seconds()
			count := float64(j - i + 1)
			worst = max(worst, count/allowed)
			if count > allowed {
				t.Errorf("%v apart: starts %d..%d (%d) exceed %d + %d/s · %v", span.Round(time.Millisecond), i, j, j-i+1, burst, rate, span+slack)
			}
		}
	}
	return worst
}
