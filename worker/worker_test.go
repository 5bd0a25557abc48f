package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/hourglass-sched/hourglass/internal/owner"
	"github.com/hourglass-sched/hourglass/internal/recovery"
	"github.com/hourglass-sched/hourglass/internal/scan"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	ns     = "wtest"
	shards = 2
)

// env is a Redis with queue "q" and an owner (mover + recovery, real
// wake-ups) on every shard, as a scheduler would run them.
type env struct {
	*shardtest.Env
	t *testing.T
}

func newEnv(t *testing.T, policy shard.QueuePolicy) *env {
	t.Helper()
	e := &env{Env: shardtest.New(t, shardtest.Options{Namespace: ns, Shards: shards, Queues: map[string]shard.QueuePolicy{"q": policy}}), t: t}
	mover, err := scan.NewMover(e.Store, scan.Config{})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := recovery.New(e.Store, recovery.Config{StrandCheck: 100 * time.Millisecond, SafetyRecheck: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	e.Own(owner.Loop{Name: "mover", Run: mover.Run}, owner.Loop{Name: "recovery", Run: rec.Run})
	return e
}

// enqueue schedules task id of queue "q" due after delay.
func (e *env) enqueue(id string, delay time.Duration) { e.Schedule("q", delay, id) }

// start runs a worker with h on queue q until the test ends (or stop).
// mod may adjust the Config (a func(*Config)) or the Worker before Run
// (a func(*Worker)).
func (e *env) start(rdb redis.UniversalClient, opts QueueOptions, h Handler, mod ...any) (*Worker, *prometheus.Registry, func()) {
	e.t.Helper()
	reg := prometheus.NewRegistry()
	cfg := Config{Namespace: ns, Shards: shards, FetchTimeout: time.Second, ShutdownGrace: time.Second, Registerer: reg}
	for _, m := range mod {
		if f, ok := m.(func(*Config)); ok {
			f(&cfg)
		}
	}
	w, err := New(rdb, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, m := range mod {
		if f, ok := m.(func(*Worker)); ok {
			f(w)
		}
	}
	if err := w.Handle("q", h, opts); err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	e.t.Cleanup(stop)
	return w, reg, stop
}

// counter sums the series of counter family name in reg. A family reg
// does not export fails the test: a misspelt or unregistered name must
// not read as 0 (every queue's series exist from Handle on).
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		var sum float64
		for _, m := range f.Metric {
			if m.Counter == nil {
				t.Fatalf("metric %s is not a counter", name)
			}
			sum += m.GetCounter().GetValue()
		}
		return sum
	}
	t.Fatalf("metric family %s is not exported", name)
	return 0
}

func TestEveryTaskOnceAndAcked(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shard.QueuePolicy{MaxRetries: 3, Timeout: 30 * time.Second})
	var mu sync.Mutex
	seen := map[string]int{}
	_, reg, _ := e.start(e.RDB, QueueOptions{Concurrency: 8}, func(ctx context.Context, task *Task) error {
		if string(task.Payload) != "p-"+task.ID || task.Attempt != 1 || task.Queue != "q" {
			return NoRetry(fmt.Errorf("bad task %+v", task))
		}
		mu.Lock()
		seen[task.ID]++
		mu.Unlock()
		return nil
	})
	for i := 0; i < 300; i++ {
		e.enqueue(fmt.Sprintf("t%d", i), time.Duration(i%50)*time.Millisecond)
	}
	testenv.WaitFor(t, 30*time.Second, "300 tasks acked", func() (bool, string) {
		n := counter(t, reg, "hourglass_worker_acks_total")
		return n == 300, fmt.Sprint(n)
	})
	mu.Lock()
	defer mu.Unlock()
	for i := 0; i < 300; i++ {
		id := fmt.Sprintf("t%d", i)
		if seen[id] != 1 {
			t.Errorf("%s handled %d times", id, seen[id])
		}
		if _, err := e.Lookup(id); !errors.Is(err, shard.ErrNotFound) {
			t.Errorf("%s still stored after ack: %v", id, err)
		}
	}
}

func TestFailingHandlerBacksOffThenDeadLetters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shard.QueuePolicy{MaxRetries: 3, Timeout: 30 * time.Second,
		Backoff: shard.Backoff{Base: 200 * time.Millisecond, Cap: time.Minute, Factor: 2}})
	var mu sync.Mutex
	var starts []time.Time
	e.start(e.RDB, QueueOptions{}, func(ctx context.Context, task *Task) error {
		if task.ID == "poison" {
			return NoRetry(errors.New("malformed order"))
		}
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		return fmt.Errorf("downstream said no (attempt %d)", task.Attempt)
	})
	e.enqueue("flaky", 0)
	e.enqueue("poison", 0)
	testenv.WaitFor(t, 30*time.Second, "flaky task dead-lettered", func() (bool, string) {
		info, err := e.Lookup("flaky")
		return err == nil && info.State == "dead", fmt.Sprintf("%s %v", info.State, err)
	})
	info, _ := e.Lookup("flaky")
	if info.Task.Attempts != 4 || !strings.Contains(info.DeadInfo, "max retries exhausted") || !strings.Contains(info.DeadInfo, "attempt 4") {
		t.Fatalf("dead task: attempts %d, info %s", info.Task.Attempts, info.DeadInfo)
	}
	mu.Lock()
	var gaps []time.Duration
	for i := 1; i < len(starts); i++ {
		gaps = append(gaps, starts[i].Sub(starts[i-1]))
	}
	mu.Unlock()
	t.Logf("retry intervals: %v", gaps)
	// Equal jitter: retry n waits between half and all of 200ms*2^(n-1).
	for i, g := range gaps {
		lo := 100 * time.Millisecond << i
		if g < lo {
			t.Errorf("retry %d after %s, want at least %s", i+1, g, lo)
		}
	}
	if len(gaps) != 3 || gaps[2] <= gaps[0] {
		t.Errorf("intervals do not grow: %v", gaps)
	}
	info, _ = e.Lookup("poison")
	if info.State != "dead" || info.Task.Attempts != 1 || !strings.Contains(info.DeadInfo, "not retryable") || !strings.Contains(info.DeadInfo, "malformed order") {
		t.Fatalf("NoRetry task: %+v", info)
	}
}

// TestBackoffJitterVaries: failed tasks with the same attempt count are
// retried after different delays, each within the equal-jitter range
// (half to all of the backoff): the jitter is drawn per nack, not fixed.
func TestBackoffJitterVaries(t *testing.T) {
	t.Parallel()
	const n, delay = 20, 10 * time.Second
	e := newEnv(t, shard.QueuePolicy{MaxRetries: 3, Timeout: 30 * time.Second,
		Backoff: shard.Backoff{Base: delay, Cap: delay, Factor: 1}})
	var mu sync.Mutex
	failed := map[string]time.Time{} // latest moment each handler failed
	e.start(e.RDB, QueueOptions{Concurrency: n}, func(ctx context.Context, task *Task) error {
		mu.Lock()
		failed[task.ID] = time.Now()
		mu.Unlock()
		return errors.New("try again later")
	})
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("j%d", i)
		e.enqueue(ids[i], 0)
	}
	testenv.WaitFor(t, 20*time.Second, "every task failed once and rescheduled", func() (bool, string) {
		for _, id := range ids {
			if info, err := e.Lookup(id); err != nil || info.State != "scheduled" || info.Task.Attempts != 1 {
				return false, fmt.Sprintf("%s: %s attempts %d %v", id, info.State, info.Task.Attempts, err)
			}
		}
		return true, ""
	})
	lo, hi := time.Duration(1<<62), time.Duration(0)
	for _, id := range ids {
		info, _ := e.Lookup(id)
		mu.Lock()
		wait := info.Task.Due.Sub(failed[id])
		mu.Unlock()
		// Redis's clock and ms rounding: allow 100ms either side; and the
		// retry is due backoff after the nack reached Redis, which on a
		// loaded 2-core machine running the race detector comes a few
		// hundred ms after the handler returned (a fresh make test saw
		// 196 ms): 500ms above.
		if wait < delay/2-100*time.Millisecond || wait > delay+500*time.Millisecond {
			t.Errorf("%s retried %s after it failed, want %s..%s", id, wait, delay/2, delay)
		}
		lo, hi = min(lo, wait), max(hi, wait)
	}
	// 20 draws from a uniform 5 s range all within 1 s of each other: a
	// chance of about 20 * 0.2^19, far below any flake.
	if hi-lo < time.Second {
		t.Fatalf("retry delays span only %s (%s..%s): the jitter does not vary", hi-lo, lo, hi)
	}
	t.Logf("20 retry delays of a 10 s backoff: %s..%s", lo, hi)
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shard.QueuePolicy{MaxRetries: 3, Timeout: 30 * time.Second})
	var mu sync.Mutex
	var starts []time.Time
	_, reg, _ := e.start(e.RDB, QueueOptions{}, func(ctx context.Context, task *Task) error {
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		if task.Attempt == 1 {
			return RetryAfter(700*time.Millisecond, errors.New("rate limited"))
		}
		return nil
	})
	e.enqueue("ra", 0)
	testenv.WaitFor(t, 10*time.Second, "acked on the second attempt", func() (bool, string) {
		return counter(t, reg, "hourglass_worker_acks_total") == 1, ""
	})
	mu.Lock()
	defer mu.Unlock()
	if g := starts[1].Sub(starts[0]); g < 700*time.Millisecond {
		t.Fatalf("retried after %s, want >= 700ms", g)
	}
}

func TestWatchdogKeepsLongHandlerLease(t *testing.T) {
	t.Parallel()
	// 800 ms leases: a busy CI machine delayed 200 ms ones' extensions
	// past their end (TestManualAck).
	e := newEnv(t, shard.QueuePolicy{MaxRetries: 3, Timeout: 800 * time.Millisecond})
	var runs atomic.Int32
	_, reg, _ := e.start(e.RDB, QueueOptions{}, func(ctx context.Context, task *Task) error {
		runs.Add(1)
		select { // four leases long
		case <-time.After(3200 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	e.enqueue("long", 0)
	testenv.WaitFor(t, 10*time.Second, "long task acked", func() (bool, string) {
		return counter(t, reg, "hourglass_worker_acks_total") == 1, fmt.Sprint(counter(t, reg, "hourglass_worker_nacks_total"))
	})
	if n := runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
	if n := counter(t, reg, "hourglass_worker_leases_lost_total"); n != 0 {
		t.Fatalf("leases lost: %v", n)
	}
}

// TestCutOffWorkerLosesLease: a worker cut off from Redis for longer than
// its lease has its handler cancelled with ErrLeaseLost, the task is
// rescheduled by recovery, and the worker's late ack is rejected as stale.
// Leased first, the lease runs out; run before its lease, the worker
// cannot take one and gives the task up before recovery may take it back.
func TestCutOffWorkerLosesLease(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name       string
		leaseAfter time.Duration
	}{{"leased first", LeaseFirst}, {"run before its lease", DefaultLeaseAfter}} {
		t.Run(c.name, func(t *testing.T) { testCutOff(t, c.leaseAfter) })
	}
}

func testCutOff(t *testing.T, leaseAfter time.Duration) {
	e := newEnv(t, shard.QueuePolicy{MaxRetries: 3, Timeout: 500 * time.Millisecond, Backoff: shard.Backoff{Base: time.Hour, Cap: time.Hour, Factor: 1}})
	proxy := testenv.StartProxy(t, e.Redis.Addr)
	wrdb := redis.NewClient(&redis.Options{Addr: proxy.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond, ReadTimeout: 300 * time.Millisecond})
	t.Cleanup(func() { wrdb.Close() }) // after the worker, which e.start stops at cleanup
	started := make(chan struct{})
	causes := make(chan error, 1)
	restored := make(chan struct{})
	_, reg, _ := e.start(wrdb, QueueOptions{LeaseAfter: leaseAfter}, func(ctx context.Context, task *Task) error {
		close(started)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		<-restored // ignore the cancellation and ack late
		return nil
	})
	e.enqueue("cut", 0)
	<-started
	proxy.Cut()
	select {
	case cause := <-causes:
		if !errors.Is(cause, ErrLeaseLost) {
			t.Fatalf("handler ctx cause %v, want ErrLeaseLost", cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("handler ctx not cancelled after the lease ran out")
	}
	testenv.WaitFor(t, 10*time.Second, "recovery rescheduled the task", func() (bool, string) {
		info, err := e.Lookup("cut")
		return err == nil && info.State == "scheduled" && info.Task.Attempts == 1, fmt.Sprintf("%s %v", info.State, err)
	})
	proxy.Restore()
	close(restored)
	testenv.WaitFor(t, 10*time.Second, "late ack rejected as stale", func() (bool, string) {
		n := counter(t, reg, "hourglass_worker_stale_tokens_total")
		return n >= 1, fmt.Sprint(n)
	})
	if n := counter(t, reg, "hourglass_worker_acks_total"); n != 0 {
		t.Fatalf("late ack counted as an ack")
	}
	if info, _ := e.Lookup("cut"); info.State != "scheduled" {
		t.Fatalf("late ack changed the task: %s", info.State)
	}
}

// TestUnrecordedOutcomeIsCounted: an ack that cannot reach Redis within
// the settle timeout is counted in hourglass_worker_unrecorded_total (the
// task is delivered again after its lease, and a test that counts repeated
// starts needs to know why), and the task is indeed delivered again.
func TestUnrecordedOutcomeIsCounted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shard.QueuePolicy{MaxRetries: 3, Timeout: 500 * time.Millisecond})
	proxy := testenv.StartProxy(t, e.Redis.Addr)
	wrdb := redis.NewClient(&redis.Options{Addr: proxy.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond, ReadTimeout: 300 * time.Millisecond})
	t.Cleanup(func() { wrdb.Close() })
	var runs atomic.Int64
	cut := make(chan struct{})
	_, reg, _ := e.start(wrdb, QueueOptions{}, func(ctx context.Context, task *Task) error {
		if runs.Add(1) == 1 {
			<-cut // finish while Redis is out of reach
		}
		return nil
	})
	e.enqueue("unrec", 0)
	testenv.WaitFor(t, 10*time.Second, "first run started", func() (bool, string) { return runs.Load() == 1, fmt.Sprint(runs.Load()) })
	proxy.Cut()
	close(cut)
	testenv.WaitFor(t, 3*opTimeout, "ack counted as unrecorded", func() (bool, string) {
		n := counter(t, reg, "hourglass_worker_unrecorded_total")
		return n == 1, fmt.Sprint(n)
	})
	if n := counter(t, reg, "hourglass_worker_acks_total"); n != 0 {
		t.Fatalf("%v acks counted while Redis was cut off", n)
	}
	proxy.Restore()
	testenv.WaitFor(t, 20*time.Second, "task delivered again and acked", func() (bool, string) {
		return runs.Load() == 2 && counter(t, reg, "hourglass_worker_acks_total") == 1, fmt.Sprint(runs.Load())
	})
}

// TestCrashBetweenPopAndLease: ids popped by a worker that dies before
// leasing them are delivered again.
func TestCrashBetweenPopAndLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shard.QueuePolicy{MaxRetries: 3, Timeout: 30 * time.Second})
	var dropped atomic.Int32
	var mu sync.Mutex
	seen := map[string]int{}
	_, reg, _ := e.start(e.RDB, QueueOptions{Concurrency: 4}, func(ctx context.Context, task *Task) error {
		mu.Lock()
		seen[task.ID]++
		mu.Unlock()
		return nil
	}, func(w *Worker) {
		w.afterPop = func(ids []string) bool {
			if dropped.Add(1) == 1 {
				t.Logf("dropping popped ids %v: the worker 'crashes' before leasing them", ids)
				return false
			}
			return true
		}
	})
	for i := 0; i < 20; i++ {
		e.enqueue(fmt.Sprintf("c%d", i), 0)
	}
	testenv.WaitFor(t, 20*time.Second, "all 20 acked", func() (bool, string) {
		n := counter(t, reg, "hourglass_worker_acks_total")
		return n == 20, fmt.Sprint(n)
	})
	if dropped.Load() < 2 {
		t.Fatal("the crash hook never ran")
	}
	mu.Lock()
	defer mu.Unlock()
	for i := 0; i < 20; i++ {
		if id := fmt.Sprintf("c%d", i); seen[id] != 1 {
			t.Errorf("%s handled %d times", id, seen[id])
		}
	}
}

// TestShutdownReleasesAtOnce: at shutdown, tasks whose handlers do not
// finish within the grace go back to their ready lists at once, without
// counting an attempt and without waiting for their (long) leases.
func TestShutdownReleasesAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shard.QueuePolicy{MaxRetries: 3, Timeout: time.Hour})
	var running atomic.Int32
	causes := make(chan error, 2)
	_, reg, stop := e.start(e.RDB, QueueOptions{Concurrency: 2}, func(ctx context.Context, task *Task) error {
		running.Add(1)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	}, func(c *Config) { c.ShutdownGrace = 100 * time.Millisecond })
	e.enqueue("s1", 0)
	e.enqueue("s2", 0)
	testenv.WaitFor(t, 10*time.Second, "both handlers running", func() (bool, string) { return running.Load() == 2, "" })
	begin := time.Now()
	stop()
	t.Logf("shutdown with 2 running handlers took %s", time.Since(begin))
	for i := 0; i < 2; i++ {
		if c := <-causes; !errors.Is(c, ErrShuttingDown) {
			t.Fatalf("handler ctx cause %v, want ErrShuttingDown", c)
		}
	}
	for _, id := range []string{"s1", "s2"} {
		info, err := e.Lookup(id)
		if err != nil || info.State != "ready" || info.Task.Attempts != 0 {
			t.Fatalf("%s after shutdown: %s attempts %d %v", id, info.State, info.Task.Attempts, err)
		}
	}
	if n := counter(t, reg, "hourglass_worker_released_total"); n != 2 {
		t.Fatalf("released %v, want 2", n)
	}
}

func TestManualAck(t *testing.T) {
	t.Parallel()
	// A lease of 1 s: the watchdog extends it every third of that, and a
	// shorter one (200 ms) lapsed on a CI machine busy with the whole
	// suite, the extension coming too late.
	e := newEnv(t, shard.QueuePolicy{MaxRetries: 3, Timeout: time.Second})
	tasks := make(chan *Task, 1)
	_, reg, _ := e.start(e.RDB, QueueOptions{ManualAck: true}, func(ctx context.Context, task *Task) error {
		tasks <- task
		return nil // finished asynchronously
	})
	e.enqueue("m", 0)
	task := <-tasks
	// Hold it past its lease: the watchdog keeps it.
	testenv.WaitFor(t, 10*time.Second, "lease extended twice", func() (bool, string) {
		info, _ := e.Lookup("m")
		return info.State == "active" && time.Until(info.At) > 0 && time.Since(task.Due) > 2200*time.Millisecond, info.State
	})
	if err := task.Ack(context.Background()); err != nil {
		t.Fatalf("manual ack: %v", err)
	}
	if err := task.Ack(context.Background()); err != nil {
		t.Fatalf("second ack should repeat the first result, got %v", err)
	}
	if n := counter(t, reg, "hourglass_worker_acks_total"); n != 1 {
		t.Fatalf("acks %v", n)
	}
	if _, err := e.Lookup("m"); !errors.Is(err, shard.ErrNotFound) {
		t.Fatalf("acked task still stored: %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	r := testenv.StartRedis(t)
	rdb := r.Client(t)
	if _, err := New(nil, Config{}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatal(err)
	}
	if _, err := New(rdb, Config{FetchTimeout: 10 * time.Millisecond}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatal(err)
	}
	w, err := New(rdb, Config{})
	if err != nil {
		t.Fatal(err)
	}
	h := func(context.Context, *Task) error { return nil }
	for _, c := range []struct {
		q    string
		h    Handler
		opts QueueOptions
	}{{"bad name", h, QueueOptions{}}, {"q", nil, QueueOptions{}}, {"q", h, QueueOptions{Concurrency: -1}}, {"q", h, QueueOptions{Lease: time.Millisecond}}} {
		if err := w.Handle(c.q, c.h, c.opts); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("Handle(%q, %+v) = %v", c.q, c.opts, err)
		}
	}
	if err := w.Run(context.Background()); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Run without queues: %v", err)
	}
}

// TestShutdownAcksHandlerThatFinished: a handler that completes its work
// after the shutdown grace cancelled its ctx is acknowledged, not
// released to run again.
func TestShutdownAcksHandlerThatFinished(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shard.QueuePolicy{MaxRetries: 3, Timeout: time.Hour})
	started := make(chan struct{})
	_, reg, stop := e.start(e.RDB, QueueOptions{}, func(ctx context.Context, task *Task) error {
		close(started)
		<-ctx.Done()
		return nil // the work was done anyway
	}, func(c *Config) { c.ShutdownGrace = NoGrace })
	e.enqueue("done", 0)
	<-started
	stop()
	if _, err := e.Lookup("done"); !errors.Is(err, shard.ErrNotFound) {
		t.Fatalf("finished task not acked at shutdown: %v", err)
	}
	if n := counter(t, reg, "hourglass_worker_released_total"); n != 0 {
		t.Fatalf("released %v", n)
	}
}

// TestManualAckAfterReleaseIsRefused: a manual ack that comes after the
// delivery was released at shutdown reports ErrAlreadySettled.
func TestManualAckAfterReleaseIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shard.QueuePolicy{MaxRetries: 3, Timeout: time.Hour})
	tasks := make(chan *Task, 1)
	_, _, stop := e.start(e.RDB, QueueOptions{ManualAck: true}, func(ctx context.Context, task *Task) error {
		tasks <- task
		return nil
	}, func(c *Config) { c.ShutdownGrace = NoGrace })
	e.enqueue("late", 0)
	task := <-tasks
	stop()
	if err := task.Ack(context.Background()); !errors.Is(err, ErrAlreadySettled) {
		t.Fatalf("ack after release = %v, want ErrAlreadySettled", err)
	}
	if info, err := e.Lookup("late"); err != nil || info.State != "ready" {
		t.Fatalf("released task: %s %v", info.State, err)
	}
}

// TestHungHandlerLosesLeaseAfterTimeout: a handler that ignores its ctx
// past its timeout stops having its lease extended, so the task is
// delivered again instead of being held forever.
func TestHungHandlerLosesLeaseAfterTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shard.QueuePolicy{MaxRetries: 3, Timeout: 300 * time.Millisecond, Backoff: shard.Backoff{Base: 10 * time.Millisecond, Cap: 10 * time.Millisecond, Factor: 1}})
	var runs atomic.Int32
	release := make(chan struct{})
	defer close(release)
	e.start(e.RDB, QueueOptions{HandlerTimeout: 200 * time.Millisecond, Concurrency: 2}, func(ctx context.Context, task *Task) error {
		if runs.Add(1) == 1 {
			<-release // hung: ignores ctx
		}
		return nil
	}, func(c *Config) { c.ShutdownGrace = NoGrace })
	e.enqueue("hung", 0)
	testenv.WaitFor(t, 10*time.Second, "hung task delivered again", func() (bool, string) {
		return runs.Load() >= 2, fmt.Sprint(runs.Load())
	})
}

// slowAcks delays every ack.lua call (four keys, the fourth the errors
// hash) by d: acks then pile up while handlers keep finishing.
type slowAcks struct{ d time.Duration }

func (slowAcks) DialHook(next redis.DialHook) redis.DialHook            { return next }
func (h slowAcks) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h slowAcks) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			a := c.Args()
			if len(a) > 6 && fmt.Sprint(a[0]) == "evalsha" && fmt.Sprint(a[2]) == "4" && strings.HasSuffix(fmt.Sprint(a[6]), ":errors") {
				time.Sleep(h.d)
				break
			}
		}
		return next(ctx, cmds)
	}
}

// TestConcurrencyBoundWithSlowAcks: a slot is free once its handler
// returned, before the ack landed, yet no more than Concurrency handlers
// ever run at once, and no more than Concurrency acks are outstanding on
// slots freed early.
func TestConcurrencyBoundWithSlowAcks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shard.QueuePolicy{MaxRetries: 3, Timeout: 30 * time.Second})
	rdb := e.Redis.Client(t)
	rdb.AddHook(slowAcks{d: 30 * time.Millisecond})
	const conc = 3
	var running, maxRunning, maxSettling atomic.Int64
	var w *Worker // set before Run starts, so before any handler runs
	_, reg, _ := e.start(rdb, QueueOptions{Concurrency: conc}, func(ctx context.Context, task *Task) error {
		n := running.Add(1)
		defer running.Add(-1)
		for m := maxRunning.Load(); n > m && !maxRunning.CompareAndSwap(m, n); m = maxRunning.Load() {
		}
		s := w.queues["q"].settling.Load()
		for m := maxSettling.Load(); s > m && !maxSettling.CompareAndSwap(m, s); m = maxSettling.Load() {
		}
		time.Sleep(2 * time.Millisecond)
		return nil
	}, func(wk *Worker) { w = wk })
	for i := 0; i < 60; i++ {
		e.enqueue(fmt.Sprintf("s%d", i), 0)
	}
	testenv.WaitFor(t, 30*time.Second, "60 tasks acked", func() (bool, string) {
		n := counter(t, reg, "hourglass_worker_acks_total")
		return n == 60, fmt.Sprint(n)
	})
	if m := maxRunning.Load(); m > conc {
		t.Fatalf("%d handlers ran at once, concurrency is %d", m, conc)
	}
	if m := maxSettling.Load(); m > conc || m == 0 {
		t.Fatalf("at most %d acks were outstanding on freed slots, want 1..%d", m, conc)
	}
}

func TestReadyRingRotates(t *testing.T) {
	t.Parallel()
	r := &readyRing{keys: []string{"a", "b", "c"}}
	var got []string
	for i := 0; i < 4; i++ {
		got = append(got, strings.Join(r.rotated(), ""))
	}
	if want := []string{"bca", "cab", "abc", "bca"}; !slices.Equal(got, want) {
		t.Fatalf("rotations %v, want %v", got, want)
	}
}

// TestRingsPerSetOfQueues: beyond 64 queues too, each set of queues has
// a ring of its own (a set sharing another's ring would pop the wrong
// lists, or lose its announcements on a cluster), and a set asked again
// gets the same ring.
func TestRingsPerSetOfQueues(t *testing.T) {
	t.Parallel()
	l, err := shard.NewLayout("rings", 2)
	if err != nil {
		t.Fatal(err)
	}
	queues := make([]*queue, 70)
	for i := range queues {
		queues[i] = &queue{name: fmt.Sprintf("q%d", i)}
	}
	rings := newRings()
	a := ringFor(rings, l, queues, []int{1}, 0, time.Now())
	b := ringFor(rings, l, queues, []int{65}, 0, time.Now()) // the same bit modulo 64
	if a == b || !slices.Equal(b.keys, l.ReadyKeys([]string{"q65"})) || !slices.Equal(a.keys, l.ReadyKeys([]string{"q1"})) {
		t.Fatalf("queues 1 and 65 share a ring or have the wrong keys: %v, %v", a.keys, b.keys)
	}
	if ringFor(rings, l, queues, []int{1}, 0, time.Now()) != a {
		t.Fatal("the same set got a new ring")
	}
	// A share: the canary side pops one shard of two, the other side the
	// other one, each in a new ring.
	share := shard.Share{Percent: 50, Tags: []string{"canary"}}
	now := time.Now()
	queues[1].share.Store(&queueShare{Share: share, canary: true})
	c := ringFor(rings, l, queues, []int{1}, 1, now)
	queues[1].share.Store(&queueShare{Share: share})
	s := ringFor(rings, l, queues, []int{1}, 2, now)
	if c == a || len(c.keys) != 1 || len(s.keys) != 1 || c.keys[0] == s.keys[0] {
		t.Fatalf("share rings: canary %v, stable %v", c.keys, s.keys)
	}
	// On one shard a 10% share gives the canary side the shard for the
	// first second of each period: outside it, an empty ring and the
	// queue stopped, so that nothing pops it; inside it, the shard.
	one, err := shard.NewLayout("rings", 1)
	if err != nil {
		t.Fatal(err)
	}
	period := now.Truncate(shard.SharePeriod)
	tenth := shard.Share{Percent: 10, Tags: []string{"canary"}}
	queues[1].share.Store(&queueShare{Share: tenth, canary: true})
	queues[1].span = one.Existing
	if e := ringFor(rings, one, queues, []int{1}, 3, period.Add(5*time.Second)); len(e.keys) != 0 || e.rotated() != nil || !queues[1].shareless(period.Add(5*time.Second)) {
		t.Fatalf("canary outside its slice: keys %v", e.keys)
	}
	if e := ringFor(rings, one, queues, []int{1}, 3, period.Add(500*time.Millisecond)); len(e.keys) != 1 || queues[1].shareless(period.Add(500*time.Millisecond)) {
		t.Fatalf("canary inside its slice: keys %v", e.keys)
	}
}

// TestPermitFollowsDeliveryLease: a concurrency permit expires with the
// delivery's lease, whether the claim had to refresh it (the task's own
// 3 s timeout, the permit acquired with the 30 s default) or the permit
// was acquired with that lease already (a queue lease of 2 s).
func TestPermitFollowsDeliveryLease(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		lease time.Duration // queue option; 0: the task's timeout
		want  time.Duration
	}{{"task timeout", 0, 3 * time.Second}, {"queue lease", 2 * time.Second, 2 * time.Second}} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, shard.QueuePolicy{MaxRetries: 3, Timeout: 3 * time.Second})
			release := make(chan struct{})
			started := make(chan struct{}, 1)
			e.start(e.RDB, QueueOptions{MaxConcurrency: 1, Lease: c.lease}, func(ctx context.Context, task *Task) error {
				started <- struct{}{}
				<-release
				return nil
			})
			defer close(release)
			e.enqueue("p", 0)
			select {
			case <-started:
			case <-time.After(10 * time.Second):
				t.Fatal("task not started")
			}
			ctx := context.Background()
			now, _ := e.RDB.Time(ctx).Result()
			zs, err := e.RDB.ZRangeWithScores(ctx, "{"+ns+":flow:q}:sem", 0, -1).Result()
			if err != nil || len(zs) != 1 {
				t.Fatalf("permits %v %v, want one", zs, err)
			}
			left := time.UnixMilli(int64(zs[0].Score)).Sub(now)
			if left > c.want || left < c.want-time.Second {
				t.Fatalf("permit expires in %s, want about %s (the delivery's lease)", left, c.want)
			}
		})
	}
}

// TestRunsBeforeLease: a popped task's handler starts before any lease; a
// handler done within LeaseAfter is acked without one, one still running
// then is leased.
func TestRunsBeforeLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shard.QueuePolicy{MaxRetries: 3, Timeout: 30 * time.Second})
	type seen struct {
		info shard.Info
	}
	quick := make(chan seen, 1)
	// slowStarted says whether a slow task was leased when its handler
	// started: it was if the pop that took it had blocked for longer than
	// MaxLeaseAfter (the worker leases such entries first), which a
	// loaded machine can make happen between two steps of this test.
	slowStarted, slowRelease := make(chan bool), make(chan struct{})
	// LeaseAfter at its bound, long against the quick task's handler and
	// ack (a few ms), so that a loaded 2-core machine does not lease it.
	_, reg, _ := e.start(e.RDB, QueueOptions{LeaseAfter: MaxLeaseAfter}, func(ctx context.Context, task *Task) error {
		if strings.HasPrefix(task.ID, "slow") {
			info, _ := e.Lookup(task.ID)
			leased := !info.At.IsZero()
			slowStarted <- leased
			if !leased {
				<-slowRelease
			}
			return nil
		}
		info, _ := e.Lookup(task.ID)
		quick <- seen{info}
		return nil
	})
	// Quick tasks until one starts unleased, as for the slow ones below.
	var s seen
	var quickID string
	var quicks int
	for quickID == "" || !s.info.At.IsZero() {
		if quicks++; quicks > 5 {
			t.Fatal("every quick task was leased before its handler started")
		}
		quickID = fmt.Sprintf("quick%d", quicks)
		e.enqueue(quickID, 0)
		select {
		case s = <-quick:
		case <-time.After(10 * time.Second):
			t.Fatal("quick task not run within 10 s")
		}
	}
	if s.info.State != "active" || !s.info.At.IsZero() {
		t.Fatalf("quick task while its handler ran: %s, lease deadline %v; want active without a lease", s.info.State, s.info.At)
	}
	testenv.WaitFor(t, 10*time.Second, "quick task acked", func() (bool, string) {
		_, err := e.Lookup(quickID)
		return counter(t, reg, "hourglass_worker_acks_total") == float64(quicks) && errors.Is(err, shard.ErrNotFound), fmt.Sprint(err)
	})
	if n := counter(t, reg, "hourglass_worker_late_leases_total"); n != 0 {
		t.Fatalf("quick task leased: %v", n)
	}

	// Slow tasks until one starts unleased (the first, unless its pop
	// had blocked too long).
	var slow string
	var tries int
	for slow == "" {
		if tries++; tries > 5 {
			t.Fatal("every slow task was leased before its handler started")
		}
		id := fmt.Sprintf("slow%d", tries)
		e.enqueue(id, 0)
		select {
		case leased := <-slowStarted:
			if !leased {
				slow = id
			}
		case <-time.After(10 * time.Second):
			t.Fatal("slow task not started within 10 s")
		}
	}
	// The counter moves once the claim's reply is back, after Redis shows
	// the lease: wait for both.
	testenv.WaitFor(t, 10*time.Second, "slow task leased after LeaseAfter", func() (bool, string) {
		info, err := e.Lookup(slow)
		n := counter(t, reg, "hourglass_worker_late_leases_total")
		return err == nil && info.State == "active" && !info.At.IsZero() && n == 1, fmt.Sprintf("%s %v %v, late leases %v", info.State, info.At, err, n)
	})
	close(slowRelease)
	testenv.WaitFor(t, 10*time.Second, "slow task acked", func() (bool, string) {
		_, err := e.Lookup(slow)
		return counter(t, reg, "hourglass_worker_acks_total") == float64(quicks+tries) && errors.Is(err, shard.ErrNotFound), fmt.Sprint(err)
	})
	if n := counter(t, reg, "hourglass_worker_stale_tokens_total") + counter(t, reg, "hourglass_worker_leases_lost_total"); n != 0 {
		t.Fatalf("stale tokens or lost leases: %v", n)
	}
}

// TestLeaseAfterBounds: LeaseAfter below 0 or beyond MaxLeaseAfter is
// refused.
func TestLeaseAfterBounds(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	w, err := New(rdb, Config{})
	if err != nil {
		t.Fatal(err)
	}
	h := func(context.Context, *Task) error { return nil }
	if err := w.Handle("a", h, QueueOptions{LeaseAfter: MaxLeaseAfter + time.Millisecond}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("LeaseAfter above the bound: %v", err)
	}
	if err := w.Handle("b", h, QueueOptions{LeaseAfter: -time.Millisecond}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("negative LeaseAfter: %v", err)
	}
	for _, la := range []time.Duration{LeaseFirst, DefaultLeaseAfter, MaxLeaseAfter} {
		if err := w.Handle(fmt.Sprint("q", int64(la)), h, QueueOptions{LeaseAfter: la}); err != nil {
			t.Fatalf("LeaseAfter %s: %v", la, err)
		}
	}
}

// TestAckOutsideRun: an ack after Run returned (a handler that outlived
// the shutdown) still settles a delivery that was never leased.
func TestAckOutsideRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shard.QueuePolicy{MaxRetries: 3, Timeout: 30 * time.Second})
	a := e.popped("late", 1)[0]
	k := newAcker(e.Store, DefaultAckLinger) // not started, as after Run
	if err := k.ack(testenv.Ctx(t, 30*time.Second), a, false); err != nil {
		t.Fatalf("ack outside Run: %v", err)
	}
	e.Gone(a.ID)
}
