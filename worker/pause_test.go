package worker

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// A worker that stalls between a pop's reply and running the tasks (here:
// the pop hook blocks until recovery has taken the task back, as a
// SIGSTOPped process would; e2e does it with a real SIGSTOP) must not run
// them when it resumes: they are leased first, found taken back and
// dropped. The task runs once, as the redelivery recovery made.
func TestStalledAfterPopDropsTaskTakenBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardtest.Policy())
	var mu sync.Mutex
	var attempts []int
	var stalls atomic.Int32
	_, reg, _ := e.start(e.RDB, QueueOptions{Concurrency: 4}, func(ctx context.Context, task *Task) error {
		mu.Lock()
		attempts = append(attempts, task.Attempt)
		mu.Unlock()
		return nil
	}, func(w *Worker) {
		w.afterPop = func(entries []string) bool {
			if stalls.Add(1) != 1 {
				return true
			}
			// Stall until recovery has counted the popped task's attempt
			// as failed and rescheduled it.
			for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				if info, err := e.Store.Lookup(context.Background(), "p0"); err == nil && info.State == "scheduled" {
					return true
				}
			}
			t.Error("recovery never took the stalled worker's task back")
			return true
		}
	})
	e.enqueue("p0", 0)
	testenv.WaitFor(t, 30*time.Second, "p0 acked", func() (bool, string) {
		n := counter(t, reg, "hourglass_worker_acks_total")
		return n == 1, fmt.Sprint(n)
	})
	mu.Lock()
	defer mu.Unlock()
	if len(attempts) != 1 || attempts[0] != 2 {
		t.Errorf("handler ran with attempts %v, want once, as attempt 2 (the stalled pop counted as failed)", attempts)
	}
	if n := counter(t, reg, "hourglass_worker_dropped_total"); n != 1 {
		t.Errorf("dropped %v deliveries, want 1", n)
	}
}

// The shutdown grace starts at the signal, not when the fetch loops have
// returned: with a blocking pop in flight (fetch timeout 5 s) a handler
// that ignores the shutdown is cancelled about one grace (1 s) after it,
// not after the pop's timeout plus the grace.
func TestShutdownGraceStartsAtSignal(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardtest.Policy())
	const fetchTimeout, grace = 5 * time.Second, time.Second
	started := make(chan struct{})
	cancelled := make(chan time.Time, 1)
	_, _, stop := e.start(e.RDB, QueueOptions{Concurrency: 2}, func(ctx context.Context, task *Task) error {
		close(started)
		<-ctx.Done()
		cancelled <- time.Now()
		return ctx.Err()
	}, func(c *Config) { c.FetchTimeout, c.ShutdownGrace = fetchTimeout, grace })
	e.enqueue("g0", 0)
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("handler never started")
	}
	signalled := time.Now()
	stop()
	took := (<-cancelled).Sub(signalled)
	t.Logf("handler cancelled %v after the shutdown signal (grace %v, fetch timeout %v)", took.Round(time.Millisecond), grace, fetchTimeout)
	if took < grace || took >= fetchTimeout {
		t.Errorf("handler cancelled %v after the signal, want the grace %v (not the fetch timeout %v on top)", took, grace, fetchTimeout)
	}
}
