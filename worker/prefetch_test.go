package worker

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// moveAhead moves every task of the env's shards that is due within ahead,
// as a scheduler with scheduler.prefetch does (the env's own movers run
// without one). The epoch is the env movers' epoch.
func (e *env) moveAhead(ahead time.Duration, want int) {
	e.t.Helper()
	moved := 0
	for sh := 0; sh < shards; sh++ {
		res, err := e.store.MoveAhead(context.Background(), sh, 1, 1000, ahead)
		if err != nil {
			e.t.Fatal(err)
		}
		moved += res.Moved
	}
	if moved != want {
		e.t.Fatalf("moved %d tasks ahead of their due time, want %d", moved, want)
	}
}

// TestHeldUntilDue: tasks moved ahead of their due time start no earlier
// than it, on both paths (run before a lease, and lease first). Held for
// longer than a task run at once could go unleased, the run-first ones
// are leased within shard.UnleasedGrace of their pop all the same, so
// recovery never takes them back: each runs once, on its first attempt.
func TestHeldUntilDue(t *testing.T) {
	for name, opts := range map[string]QueueOptions{
		"run first":   {Concurrency: 20},
		"lease first": {Concurrency: 20, LeaseAfter: LeaseFirst},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, shard.QueuePolicy{MaxRetries: 3, Timeout: 30 * time.Second})
			const n = 10
			var mu sync.Mutex
			early, runs := []string{}, map[string]int{}
			var done atomic.Int32
			_, reg, _ := e.start(e.rdb, opts, func(ctx context.Context, task *Task) error {
				now := time.Now()
				mu.Lock()
				runs[task.ID]++
				if now.Before(task.Due) || task.Attempt != 1 {
					early = append(early, fmt.Sprintf("%s: started %s early, attempt %d", task.ID, task.Due.Sub(now), task.Attempt))
				}
				mu.Unlock()
				done.Add(1)
				return nil
			})
			for i := range n {
				// Due in 0.7 to 1.15 s: held longer than shard.UnleasedGrace
				// allows a task to go unleased after its pop.
				e.enqueue(fmt.Sprintf("h%d", i), 700*time.Millisecond+time.Duration(i)*50*time.Millisecond)
			}
			e.moveAhead(2*time.Second, n)
			testenv.WaitFor(t, 15*time.Second, "every held task ran", func() (bool, string) {
				return done.Load() == n, ""
			})
			mu.Lock()
			defer mu.Unlock()
			if len(early) > 0 {
				t.Fatalf("tasks started before their due time or on a retry: %v", early)
			}
			for id, c := range runs {
				if c != 1 {
					t.Fatalf("%s ran %d times", id, c)
				}
			}
			if h := counter(t, reg, "hourglass_worker_held_total"); h != n {
				t.Fatalf("held %v deliveries, want %d", h, n)
			}
			if opts.LeaseAfter != LeaseFirst {
				// Popped at once and held up to 1.15 s, each is leased
				// MaxLeaseAfter after its pop, before its handler starts.
				if l := counter(t, reg, "hourglass_worker_late_leases_total"); l == 0 {
					t.Fatal("no held task was leased while it waited")
				}
			}
			testenv.WaitFor(t, 10*time.Second, "every task acked and gone", func() (bool, string) {
				for id := range runs {
					if _, err := e.lookup(id); err == nil {
						return false, id + " still stored"
					}
				}
				return true, ""
			})
		})
	}
}

// TestHeldTaskReleasedAtShutdown: a worker that stops while it holds a
// task for its due time gives the task back, unrun and with no attempt
// counted, for another worker to run when due.
func TestHeldTaskReleasedAtShutdown(t *testing.T) {
	e := newEnv(t, shard.QueuePolicy{MaxRetries: 3, Timeout: 30 * time.Second})
	var ran atomic.Int32
	_, reg, stop := e.start(e.rdb, QueueOptions{}, func(ctx context.Context, task *Task) error {
		ran.Add(1)
		return nil
	}, func(c *Config) { c.ShutdownGrace = NoGrace })
	e.enqueue("later", 5*time.Second)
	e.moveAhead(10*time.Second, 1)
	testenv.WaitFor(t, 10*time.Second, "the task popped and held", func() (bool, string) {
		return counter(t, reg, "hourglass_worker_held_total") == 1, ""
	})
	stop()
	if n := ran.Load(); n != 0 {
		t.Fatalf("handler ran %d times before the task was due", n)
	}
	info, err := e.lookup("later")
	if err != nil || info.State != "ready" || info.Task.Attempts != 0 {
		t.Fatalf("after shutdown: state %q attempts %d err %v; want ready, 0", info.State, info.Task.Attempts, err)
	}
	if n := counter(t, reg, "hourglass_worker_released_total"); n != 1 {
		t.Fatalf("released %v, want 1", n)
	}
}
