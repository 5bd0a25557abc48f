package worker

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestPauseAndResume: two workers run a queue that keeps receiving
// tasks. Once the pause has taken effect on both, no task of the queue
// starts, while enqueues and moves go on; the resume reaches the workers
// as an event and every task enqueued runs exactly once.
func TestPauseAndResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardtest.Policy())
	in := e.inspector()
	var mu sync.Mutex
	starts := map[string]int{}
	var last time.Time
	h := func(ctx context.Context, task *Task) error {
		mu.Lock()
		starts[task.ID]++
		last = time.Now()
		mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		return nil
	}
	started := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(starts)
	}
	_, reg1, _ := e.start(e.RDB, QueueOptions{Concurrency: 4}, h)
	_, reg2, _ := e.start(e.RDB, QueueOptions{Concurrency: 4}, h)

	// The producer: a task due now every 2 ms until stopped.
	ctx, stopProducing := context.WithCancel(context.Background())
	var produced sync.WaitGroup
	var ids []string
	produced.Add(1)
	go func() {
		defer produced.Done()
		for i := 0; ctx.Err() == nil; i++ {
			id := fmt.Sprintf("p%d", i)
			e.enqueue(id, 0)
			mu.Lock()
			ids = append(ids, id)
			mu.Unlock()
			time.Sleep(2 * time.Millisecond)
		}
	}()
	defer func() { stopProducing(); produced.Wait() }()
	testenv.WaitFor(t, 20*time.Second, "tasks running before the pause", func() (bool, string) {
		n := started()
		return n >= 50, fmt.Sprint(n)
	})

	pauseCall := time.Now()
	if err := in.Pause(testenv.Ctx(t, 10*time.Second), "q"); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "both workers paused and idle", func() (bool, string) {
		p := gauge(t, reg1, "hourglass_worker_queue_paused") + gauge(t, reg2, "hourglass_worker_queue_paused")
		r := gauge(t, reg1, "hourglass_worker_running") + gauge(t, reg2, "hourglass_worker_running")
		return p == 2 && r == 0, fmt.Sprintf("paused on %v workers, %v running", p, r)
	})
	mu.Lock()
	before, lastStart := len(starts), last
	mu.Unlock()
	t.Logf("pause took effect on both workers within %s of the call; the last task started %s after it",
		time.Since(pauseCall).Round(time.Millisecond), max(0, lastStart.Sub(pauseCall)).Round(time.Millisecond))

	// Enqueues and moves go on: the ready lists fill up.
	testenv.WaitFor(t, 20*time.Second, "tasks moved while paused", func() (bool, string) {
		q, err := in.Queue(testenv.Ctx(t, 5*time.Second), "q")
		if err != nil {
			t.Fatal(err)
		}
		return q.Counts.Ready >= 100 && q.State == inspect.QueuePaused, fmt.Sprintf("%+v %s", q.Counts, q.State)
	})
	if n := started(); n != before {
		t.Fatalf("%d tasks started while the queue was paused", n-before)
	}

	resumeCall := time.Now()
	if err := in.Resume(testenv.Ctx(t, 10*time.Second), "q"); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "a task started after the resume", func() (bool, string) {
		return started() > before, ""
	})
	t.Logf("first task started %s after the resume call", time.Since(resumeCall).Round(time.Millisecond))
	stopProducing()
	produced.Wait()
	mu.Lock()
	all := append([]string(nil), ids...)
	mu.Unlock()
	testenv.WaitFor(t, 30*time.Second, "every task enqueued started", func() (bool, string) {
		n := started()
		return n == len(all), fmt.Sprintf("%d of %d", n, len(all))
	})
	mu.Lock()
	defer mu.Unlock()
	for _, id := range all {
		if starts[id] != 1 {
			t.Errorf("%s started %d times", id, starts[id])
		}
	}
}

// TestPausedWhileWaitingForPlace: a held task that came due while its
// queue's only handler place was busy, and whose queue is paused while it
// waits for the place, is given back when it gets the place, not run:
// the pause is checked after the wait.
func TestPausedWhileWaitingForPlace(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardtest.Policy())
	in := e.inspector()
	release := make(chan struct{})
	var mu sync.Mutex
	var started []string
	_, reg, _ := e.start(e.RDB, QueueOptions{Concurrency: 1}, func(ctx context.Context, task *Task) error {
		mu.Lock()
		started = append(started, task.ID)
		first := len(started) == 1
		mu.Unlock()
		if first {
			<-release
		}
		return nil
	}, func(w *Worker) { w.deps.maxHold = 5 * time.Second })
	e.Schedule("q", 3*time.Second, "w0", "w1")
	if moved := e.MoveAhead(4 * time.Second); moved != 2 {
		t.Fatalf("moved %d tasks ahead of their due time, want 2", moved)
	}
	testenv.WaitFor(t, 10*time.Second, "one handler running and the other task waiting for its place", func() (bool, string) {
		mu.Lock()
		n := len(started)
		mu.Unlock()
		w := counter(t, reg, "hourglass_worker_place_waits_total")
		return n == 1 && w == 1, fmt.Sprintf("%d started, %v waiting", n, w)
	})
	if err := in.Pause(testenv.Ctx(t, 10*time.Second), "q"); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "the pause seen by the worker", func() (bool, string) {
		return gauge(t, reg, "hourglass_worker_queue_paused") == 1, ""
	})
	close(release)
	testenv.WaitFor(t, 10*time.Second, "the waiting task given back", func() (bool, string) {
		r := counter(t, reg, "hourglass_worker_released_total")
		return r == 1, fmt.Sprintf("%v released", r)
	})
	mu.Lock()
	defer mu.Unlock()
	if len(started) != 1 {
		t.Fatalf("handlers started: %v; the paused queue's waiting task ran", started)
	}
}

// inspector returns an inspect.Inspector on the env's Redis, for the
// pause and resume an operator would send.
func (e *env) inspector() *inspect.Inspector {
	e.t.Helper()
	in, err := inspect.New(e.RDB, inspect.Config{Namespace: ns, Shards: shards})
	if err != nil {
		e.t.Fatal(err)
	}
	return in
}
