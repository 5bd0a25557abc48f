package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestCancelRunningTask (#27): a task cancelled from another process
// while its handler runs (leased, or popped and not leased yet) gets its
// handler's ctx cancelled with the cause ErrCancelled; nothing the
// handler returns is recorded (no ack, no nack, no retry) and the task
// is "cancelled". The time from Cancel's return to the handler seeing
// its ctx end is printed, p50 and p99 over the tasks (a figure, not a
// bar: the bench's to measure).
func TestCancelRunningTask(t *testing.T) {
	t.Parallel()
	// LeaseAfter at its bound: the handlers start before any lease (but
	// for a pop that blocked longer, which a loaded machine may make).
	t.Run("popped, not leased yet", func(t *testing.T) {
		t.Parallel()
		testCancelRunning(t, QueueOptions{Concurrency: 8, LeaseAfter: MaxLeaseAfter}, false)
	})
	t.Run("leased", func(t *testing.T) {
		t.Parallel()
		testCancelRunning(t, QueueOptions{Concurrency: 8, LeaseAfter: LeaseFirst}, true)
	})
}

func testCancelRunning(t *testing.T, opts QueueOptions, leased bool) {
	e := newEnv(t, shard.QueuePolicy{MaxRetries: 3, Timeout: 30 * time.Second})
	started := make(chan string, 64)
	ended := make(chan struct {
		id    string
		at    time.Time
		cause error
	}, 64)
	_, reg, _ := e.start(e.RDB, opts, func(ctx context.Context, task *Task) error {
		started <- task.ID
		<-ctx.Done()
		ended <- struct {
			id    string
			at    time.Time
			cause error
		}{task.ID, time.Now(), context.Cause(ctx)}
		return errors.New("the handler's own error, which must not count")
	})
	const n = 40
	var lat []time.Duration
	unleased := 0
	for i := range n {
		id := fmt.Sprintf("long%d", i)
		e.enqueue(id, 0)
		select {
		case got := <-started:
			if got != id {
				t.Fatalf("started %s, want %s", got, id)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not start within 10 s", id)
		}
		info, err := e.Lookup(id)
		if err != nil || info.State != "active" || (leased && info.At.IsZero()) {
			t.Fatalf("lookup of %s while it runs: %+v, %v; want active, leased %v", id, info, err, leased)
		}
		if info.At.IsZero() {
			unleased++
		}
		st, err := e.Store.Cancel(testenv.Ctx(t, 5*time.Second), id)
		sent := time.Now()
		if err != nil || st != "active" {
			t.Fatalf("cancel %s: %q, %v; want it cancelled from active", id, st, err)
		}
		select {
		case x := <-ended:
			if x.id != id || !errors.Is(x.cause, ErrCancelled) {
				t.Fatalf("handler of %s ended with cause %v, want ErrCancelled", x.id, x.cause)
			}
			lat = append(lat, max(x.at.Sub(sent), 0))
		case <-time.After(10 * time.Second):
			t.Fatalf("the handler of %s was not cancelled within 10 s", id)
		}
		if info, err := e.Lookup(id); err != nil || info.State != "cancelled" {
			t.Fatalf("lookup of %s: %+v, %v; want cancelled", id, info, err)
		}
	}
	testenv.WaitFor(t, 10*time.Second, "every cancelled delivery settled as cancelled", func() (bool, string) {
		c := counter(t, reg, "hourglass_worker_cancelled_total")
		return c == n, fmt.Sprint(c)
	})
	for _, m := range []string{"hourglass_worker_acks_total", "hourglass_worker_nacks_total", "hourglass_worker_stale_tokens_total"} {
		if c := counter(t, reg, m); c != 0 {
			t.Errorf("%s = %v after cancels, want 0: nothing the handlers returned is recorded", m, c)
		}
	}
	if !leased && unleased == 0 {
		t.Error("every task was leased before its handler started: the unleased path went untested")
	}
	slices.Sort(lat)
	t.Logf("cancel to handler ctx done, over %d running tasks: p50 %v, p99 %v, max %v", n, lat[n/2], lat[n*99/100], lat[n-1])
}

// TestCancelHeldTask: a task moved ahead of its due time and held by the
// worker (scheduler.prefetch) is cancelled before its handler starts: the
// handler never runs, nothing is recorded for it (no nack of a revoked
// delivery), and it counts as cancelled.
func TestCancelHeldTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shard.QueuePolicy{MaxRetries: 3, Timeout: 30 * time.Second})
	ran := make(chan string, 1)
	_, reg, _ := e.start(e.RDB, QueueOptions{}, func(ctx context.Context, task *Task) error {
		ran <- task.ID
		return nil
	}, func(w *Worker) { w.deps.maxHold = time.Minute })
	e.enqueue("later", 5*time.Second)
	e.moveAhead(10*time.Second, 1)
	testenv.WaitFor(t, 10*time.Second, "the task popped and held", func() (bool, string) {
		return counter(t, reg, "hourglass_worker_held_total") == 1, ""
	})
	if st, err := e.Store.Cancel(testenv.Ctx(t, 5*time.Second), "later"); err != nil || st != "active" {
		t.Fatalf("cancel of the held task: %q, %v; want cancelled from active", st, err)
	}
	testenv.WaitFor(t, 10*time.Second, "the held delivery settled as cancelled", func() (bool, string) {
		c := counter(t, reg, "hourglass_worker_cancelled_total")
		return c == 1, fmt.Sprint(c)
	})
	for _, m := range []string{"hourglass_worker_nacks_total", "hourglass_worker_stale_tokens_total", "hourglass_worker_released_total"} {
		if c := counter(t, reg, m); c != 0 {
			t.Errorf("%s = %v, want 0", m, c)
		}
	}
	select {
	case id := <-ran:
		t.Fatalf("the handler of the cancelled task %s ran", id)
	default:
	}
}
