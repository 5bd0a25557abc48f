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
