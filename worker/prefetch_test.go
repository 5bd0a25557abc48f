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

// moveAhead moves every task due within ahead, as a scheduler with
// scheduler.prefetch does (the env's own movers run without one), and
// checks that want were moved.
func (e *env) moveAhead(ahead time.Duration, want int) {
	e.t.Helper()
	if moved := e.MoveAhead(ahead); moved != want {
		e.t.Fatalf("moved %d tasks ahead of their due time, want %d", moved, want)
	}
}

// TestHeldUntilDue: tasks moved ahead of their due time start no earlier
// than it, on both paths (run before a lease, and lease first), each once
// and on its first attempt. With LeaseAfter at its maximum, a run-first
// task held for a while is leased MaxLeaseAfter after its pop, while its
// 400 ms handler runs: LeaseAfter after the handler's start would come
// after the handler ended, and later after the pop than recovery allows
// for in the worst case.
func TestHeldUntilDue(t *testing.T) {
	t.Parallel()
	for name, opts := range map[string]QueueOptions{
		"run first":   {Concurrency: 20, LeaseAfter: MaxLeaseAfter},
		"lease first": {Concurrency: 20, LeaseAfter: LeaseFirst},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, shard.QueuePolicy{MaxRetries: 3, Timeout: 30 * time.Second})
			const n = 10
			var mu sync.Mutex
			early, runs := []string{}, map[string]int{}
			var done atomic.Int32
			_, reg, _ := e.start(e.RDB, opts, func(ctx context.Context, task *Task) error {
				now := time.Now()
				mu.Lock()
				runs[task.ID]++
				if now.Before(task.Due) || task.Attempt != 1 {
					early = append(early, fmt.Sprintf("%s: started %s early, attempt %d", task.ID, task.Due.Sub(now), task.Attempt))
				}
				mu.Unlock()
				// The handler's work: longer than MaxLeaseAfter, so that
				// the lease surely comes while it runs, however late the
				// pop came on a loaded machine.
				time.Sleep(MaxLeaseAfter + 300*time.Millisecond)
				done.Add(1)
				return nil
			})
			// Rounds of n tasks due in 250 ms, within the worker's hold
			// limit, each enqueued in one round trip, until a task was
			// held: on a loaded machine the env's mover may move some
			// when due before the prefetching move, and a pop may come
			// after the due time; those run unheld, and must still run
			// once and not early.
			var held float64
			for round := 1; held == 0; round++ {
				if round > 3 {
					t.Fatal("no task was held in 3 rounds")
				}
				ids := make([]string, n)
				for i := range ids {
					ids[i] = fmt.Sprintf("h%d-%d", round, i)
				}
				e.Schedule("q", 250*time.Millisecond, ids...)
				if moved := e.MoveAhead(shard.MaxHold); moved == 0 {
					t.Fatal("no task moved ahead of its due time")
				}
				testenv.WaitFor(t, 15*time.Second, "every held task ran", func() (bool, string) {
					return done.Load() == int32(round*n), ""
				})
				held = counter(t, reg, "hourglass_worker_held_total")
			}
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
			if opts.LeaseAfter != LeaseFirst {
				// Every handler outlives LeaseAfter, held or not: each
				// task is leased while it runs. The counter moves when
				// the claim's reply is back.
				testenv.WaitFor(t, 10*time.Second, "every task leased while its handler ran", func() (bool, string) {
					l := counter(t, reg, "hourglass_worker_late_leases_total")
					return int(l) == len(runs), fmt.Sprintf("%v of %d tasks leased (%v held)", l, len(runs), held)
				})
			}
			testenv.WaitFor(t, 10*time.Second, "every task acked and gone", func() (bool, string) {
				for id := range runs {
					if _, err := e.Lookup(id); err == nil {
						return false, id + " still stored"
					}
				}
				return true, ""
			})
		})
	}
}

// TestHeldTasksFreeTheirSlots: tasks held for their due time give their
// slots back, so that the worker pops more of them than its concurrency
// (at most twice as many: as many again are held in their slots), and
// when they come due at once no more than Concurrency handlers run.
func TestHeldTasksFreeTheirSlots(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shard.QueuePolicy{MaxRetries: 3, Timeout: 30 * time.Second})
	const concurrency, n = 2, 6
	var running, most, ran atomic.Int32
	var mu sync.Mutex
	var early []string
	_, reg, _ := e.start(e.RDB, QueueOptions{Concurrency: concurrency}, func(ctx context.Context, task *Task) error {
		if now := time.Now(); now.Before(task.Due) {
			mu.Lock()
			early = append(early, fmt.Sprintf("%s started %s early", task.ID, task.Due.Sub(now)))
			mu.Unlock()
		}
		r := running.Add(1)
		for m := most.Load(); r > m && !most.CompareAndSwap(m, r); m = most.Load() {
		}
		// The handler's work: long enough for every due delivery to be
		// waiting for a place when the first handlers still run.
		time.Sleep(200 * time.Millisecond)
		running.Add(-1)
		ran.Add(1)
		return nil
	}, func(w *Worker) { w.deps.maxHold = time.Minute })
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("h%d", i)
	}
	e.Schedule("q", 5*time.Second, ids...)
	e.moveAhead(10*time.Second, n)
	testenv.WaitFor(t, 4*time.Second, "twice the concurrency popped and held", func() (bool, string) {
		h := counter(t, reg, "hourglass_worker_held_total")
		return h == 2*concurrency, fmt.Sprintf("%v held", h)
	})
	testenv.WaitFor(t, 20*time.Second, "every task ran", func() (bool, string) {
		return ran.Load() == n, fmt.Sprintf("%d of %d ran", ran.Load(), n)
	})
	mu.Lock()
	defer mu.Unlock()
	if len(early) > 0 {
		t.Fatalf("tasks started before their due time: %v", early)
	}
	if m := most.Load(); m != concurrency {
		t.Fatalf("at most %d handlers ran at once, want %d", m, concurrency)
	}
	// The last two were popped after the held ones were due: not held,
	// so no more than twice the concurrency was.
	if h := counter(t, reg, "hourglass_worker_held_total"); h != 2*concurrency {
		t.Fatalf("%v deliveries held, want %d", h, 2*concurrency)
	}
	if w := counter(t, reg, "hourglass_worker_place_waits_total"); w < 1 {
		t.Fatalf("no delivery waited for a handler place (%v)", w)
	}
}

// TestNoPlaceGivesTaskBack: a held task that comes due while its
// queue's handlers are all busy waits for a place at most the hold limit,
// then is given back (no attempt counted) instead of being kept from
// other workers by a handler that runs long; it runs once a handler is
// free.
func TestNoPlaceGivesTaskBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shard.QueuePolicy{MaxRetries: 3, Timeout: 30 * time.Second})
	release := make(chan struct{})
	var mu sync.Mutex
	attempts := map[string][]int{}
	_, reg, _ := e.start(e.RDB, QueueOptions{Concurrency: 1}, func(ctx context.Context, task *Task) error {
		mu.Lock()
		attempts[task.ID] = append(attempts[task.ID], task.Attempt)
		first := len(attempts) == 1
		mu.Unlock()
		if first {
			<-release // the long handler
		}
		return nil
	}, func(w *Worker) { w.deps.maxHold = 3 * time.Second })
	e.Schedule("q", 2*time.Second, "p0", "p1")
	e.moveAhead(2500*time.Millisecond, 2)
	testenv.WaitFor(t, 10*time.Second, "the task without a place given back", func() (bool, string) {
		r := counter(t, reg, "hourglass_worker_released_total")
		return r == 1, fmt.Sprintf("%v released", r)
	})
	if w := counter(t, reg, "hourglass_worker_place_waits_total"); w != 1 {
		t.Fatalf("%v deliveries waited for a place, want 1", w)
	}
	mu.Lock()
	if len(attempts) != 1 {
		t.Fatalf("handlers started: %v, want one", attempts)
	}
	mu.Unlock()
	close(release)
	testenv.WaitFor(t, 10*time.Second, "both tasks ran", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(attempts) == 2, fmt.Sprint(attempts)
	})
	mu.Lock()
	defer mu.Unlock()
	for id, a := range attempts {
		if len(a) != 1 || a[0] != 1 {
			t.Fatalf("%s ran as attempts %v, want once as attempt 1", id, a)
		}
	}
}

// TestClockBehindRunsAtOnce: a task due further ahead of the worker's
// clock than any prefetch can move one (the worker's clock is behind
// Redis's, as here where the test moves it 5 s ahead) is run at once, not
// held for the skew, and counted.
func TestClockBehindRunsAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shard.QueuePolicy{MaxRetries: 3, Timeout: 30 * time.Second})
	ran := make(chan time.Time, 1)
	_, reg, _ := e.start(e.RDB, QueueOptions{}, func(ctx context.Context, task *Task) error {
		ran <- task.Due
		return nil
	})
	e.enqueue("skewed", 5*time.Second)
	e.moveAhead(10*time.Second, 1)
	select {
	case due := <-ran:
		if time.Until(due) < time.Second {
			t.Fatalf("ran %s before its due time, want about 5 s: held", time.Until(due))
		}
	case <-time.After(4 * time.Second):
		t.Fatal("a task due 5 s ahead of the worker's clock was held")
	}
	if n := counter(t, reg, "hourglass_worker_clock_behind_total"); n != 1 {
		t.Fatalf("clock_behind %v, want 1", n)
	}
	if n := counter(t, reg, "hourglass_worker_held_total"); n != 0 {
		t.Fatalf("held %v, want 0", n)
	}
}

// TestHeldTaskReleasedAtShutdown: a worker that stops while it holds a
// task for its due time gives the task back, unrun and with no attempt
// counted, for another worker to run when due. The hold limit is raised
// so that the task is surely still held when the worker stops.
func TestHeldTaskReleasedAtShutdown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shard.QueuePolicy{MaxRetries: 3, Timeout: 30 * time.Second})
	var ran atomic.Int32
	_, reg, stop := e.start(e.RDB, QueueOptions{}, func(ctx context.Context, task *Task) error {
		ran.Add(1)
		return nil
	}, func(c *Config) { c.ShutdownGrace = NoGrace }, func(w *Worker) { w.deps.maxHold = time.Minute })
	e.enqueue("later", 5*time.Second)
	e.moveAhead(10*time.Second, 1)
	testenv.WaitFor(t, 10*time.Second, "the task popped and held", func() (bool, string) {
		return counter(t, reg, "hourglass_worker_held_total") == 1, ""
	})
	stop()
	if n := ran.Load(); n != 0 {
		t.Fatalf("handler ran %d times before the task was due", n)
	}
	info, err := e.Lookup("later")
	if err != nil || info.State != "ready" || info.Task.Attempts != 0 {
		t.Fatalf("after shutdown: state %q attempts %d err %v; want ready, 0", info.State, info.Task.Attempts, err)
	}
	// Released once by the hold, and perhaps once more: the grace starts
	// at the signal, so a pop still in flight may take the task again and
	// give it straight back.
	if n := counter(t, reg, "hourglass_worker_released_total"); n < 1 || n > 2 {
		t.Fatalf("released %v, want 1 (or 2)", n)
	}
}

// TestHeldOnRedisClock: a worker whose clock is off from Redis's holds a
// task moved ahead of its due time until Redis's clock shows that time.
// Held on its own clock, the task would start early by the skew (clock
// ahead), or at once (clock behind: the due time looks further ahead than
// any prefetch moves a task).
func TestHeldOnRedisClock(t *testing.T) {
	t.Parallel()
	for name, skew := range map[string]time.Duration{"ahead": 200 * time.Millisecond, "behind": -200 * time.Millisecond} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, shard.QueuePolicy{MaxRetries: 3, Timeout: 30 * time.Second})
			started := make(chan start, 1)
			w, reg, _ := e.start(e.RDB, QueueOptions{}, func(ctx context.Context, task *Task) error {
				started <- start{time.Now(), task.Due} // the true clock: Redis runs on this host
				return nil
			}, func(w *Worker) { w.deps.now = func() time.Time { return time.Now().Add(skew) } })
			// The worker's first reading, as its first delivery would take
			// it; a read that fails (over clockReadTimeout on a loaded
			// machine) would leave the worker on its own clock.
			src := w.deps.clock.source(0)
			testenv.WaitFor(t, 10*time.Second, "a reading of Redis's clock", func() (bool, string) {
				src.mu.Lock()
				src.failedAt = time.Time{}
				src.mu.Unlock()
				w.deps.clock.startAt(testenv.Ctx(t, 5*time.Second), 0, time.Now())
				return src.reading.Load() != nil, "every read failed"
			})
			e.Schedule("q", 250*time.Millisecond, "skewed")
			moveAheadAndStart(t, e, shard.MaxHold, started)
			if n := counter(t, reg, "hourglass_worker_clock_behind_total"); n != 0 {
				t.Fatalf("clock_behind %v, want 0: the skew was measured", n)
			}
		})
	}
}

// TestStagedHeldWithoutClockReading: a worker that cannot read Redis's
// clock, and whose own runs 2 s behind it, holds a task staged a full
// shard.MaxStage ahead for the hold limit instead of running it at once:
// on its own clock the task looks further ahead than any mover moves one,
// but it must not start before its due time. (2 s, not less: on a loaded
// machine the pop may come some 300 ms after the move, and a task that
// then looks less than the hold limit ahead is held to its due time on
// the worker's clock, not counted as behind.)
func TestStagedHeldWithoutClockReading(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shard.QueuePolicy{MaxRetries: 3, Timeout: 30 * time.Second})
	started := make(chan start, 1)
	w, reg, _ := e.start(e.RDB, QueueOptions{}, func(ctx context.Context, task *Task) error {
		started <- start{time.Now(), task.Due}
		return nil
	}, func(w *Worker) {
		w.deps.now = func() time.Time { return time.Now().Add(-2 * time.Second) }
	})
	src := w.deps.clock.source(0)
	src.mu.Lock()
	src.failedAt = time.Now().Add(time.Hour) // no read is tried: as after a failed one
	src.mu.Unlock()
	e.Schedule("q", shard.MaxStage, "staged")
	moveAheadAndStart(t, e, shard.MaxStage, started)
	if src.reading.Load() != nil {
		t.Fatal("the worker read Redis's clock: the test's premise does not hold")
	}
	if n := counter(t, reg, "hourglass_worker_clock_behind_total"); n != 1 {
		t.Fatalf("clock_behind %v, want 1", n)
	}
}

// start is when a handler started (the true clock: Redis runs on this
// host) and the due time of its task.
type start struct{ at, due time.Time }

// moveAheadAndStart moves the one scheduled task up to ahead before its
// due time and waits for its handler's start on started, which must not
// come before the due time.
func moveAheadAndStart(t *testing.T, e *env, ahead time.Duration, started <-chan start) {
	t.Helper()
	if moved := e.MoveAhead(ahead); moved != 1 {
		t.Fatalf("moved %d tasks ahead of their due time, want 1", moved)
	}
	select {
	case s := <-started:
		// Redis's TIME has microseconds, due times milliseconds.
		if early := s.due.Sub(s.at); early > time.Millisecond {
			t.Fatalf("started %s before its due time on Redis's clock", early)
		}
		t.Logf("started %s after its due time", s.at.Sub(s.due))
	case <-time.After(10 * time.Second):
		t.Fatal("the task did not run")
	}
}
