package e2e_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/internal/promread"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// target is the HTTP endpoint the worker binaries deliver to. It records
// every delivery; behave decides each answer.
type target struct {
	*httptest.Server
	mu    sync.Mutex
	count map[string]int
	// arrivals holds every request's arrival time, in order.
	arrivals []time.Time
	late     []time.Duration // receive time - due time, per first delivery
	first    map[string]time.Time
	due      map[string]time.Time                                                      // the due time of each id's first delivery
	attempt  map[string]int                                                            // the attempt number of each id's first delivery
	payload  map[string]string                                                         // the payload of each id's first delivery
	behave   func(w http.ResponseWriter, r *http.Request, id string, attempt int) bool // false: answer 204
}

func newTarget(t *testing.T) *target {
	tg := &target{count: map[string]int{}, first: map[string]time.Time{}, due: map[string]time.Time{}, attempt: map[string]int{}, payload: map[string]string{}}
	tg.Server = httptest.NewServer(http.HandlerFunc(tg.serve))
	t.Cleanup(tg.Close)
	return tg
}

func (tg *target) serve(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	body, _ := io.ReadAll(r.Body)
	id := r.Header.Get("Hourglass-Task-Id")
	attempt, _ := strconv.Atoi(r.Header.Get("Hourglass-Attempt"))
	dueMs, _ := strconv.ParseInt(r.Header.Get("Hourglass-Due-Ms"), 10, 64)
	tg.mu.Lock()
	tg.arrivals = append(tg.arrivals, now)
	tg.count[id]++
	if tg.count[id] == 1 {
		tg.first[id] = now
		tg.due[id] = time.UnixMilli(dueMs)
		tg.attempt[id] = attempt
		tg.payload[id] = string(body)
		tg.late = append(tg.late, now.Sub(time.UnixMilli(dueMs)))
	}
	behave := tg.behave
	tg.mu.Unlock()
	if behave != nil && behave(w, r, id, attempt) {
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (tg *target) setBehave(f func(w http.ResponseWriter, r *http.Request, id string, attempt int) bool) {
	tg.mu.Lock()
	tg.behave = f
	tg.mu.Unlock()
}

// arrived returns a copy of every request's arrival time, in order.
func (tg *target) arrived() []time.Time {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return slices.Clone(tg.arrivals)
}

func (tg *target) delivered() (distinct, total int) {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	for _, n := range tg.count {
		total += n
	}
	return len(tg.count), total
}

// workerArgs configures the "default" queue's HTTP target and limits for
// both binaries (schedulers register the lease timeout).
func workerArgs(url string, timeout time.Duration, concurrency int) []string {
	return []string{
		"-set", "queues.default.http.url=" + url,
		"-set", fmt.Sprintf("queues.default.timeout=%s", timeout),
		"-set", fmt.Sprintf("queues.default.concurrency=%d", concurrency),
		"-set", "worker.shutdown_grace=2s",
	}
}

// leasesLost sums the deliveries after which a task may start again
// on a worker: those whose lease the workers could not keep
// (hourglass_worker_leases_lost_total), those whose ack, nack or
// extension Redis refused by token (hourglass_worker_stale_tokens_total:
// a handler that finished after recovery took its popped task back, on
// a starved machine), those whose outcome could not be recorded in time
// (hourglass_worker_unrecorded_total: redelivered after the lease) and
// failed attempts rescheduled (hourglass_worker_retries_total: a request
// to the target that failed on a loaded machine). At-least-once delivery
// allows a repeated start only after one of those (or a Redis failover):
// a test that wants each task once allows this many more. It logs the
// counters that are not zero.
func leasesLost(t *testing.T, ctx context.Context, workers ...*sched) float64 {
	t.Helper()
	var lost float64
	for _, w := range workers {
		fams, err := promread.Families(ctx, "http://"+w.http+"/metrics")
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"hourglass_worker_leases_lost_total", "hourglass_worker_stale_tokens_total",
			"hourglass_worker_unrecorded_total", "hourglass_worker_retries_total"} {
			n, err := promread.Counter(fams, name)
			if err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Logf("%s: %s %v", w.id, name, n)
			}
			lost += n
		}
	}
	return lost
}

func percentile(ds []time.Duration, q float64) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s) == 0 {
		return 0
	}
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// TestSoakEndToEndEveryTaskOnce is the long form of
// TestEndToEndEveryTaskOnce: 20,000 tasks.
func TestSoakEndToEndEveryTaskOnce(t *testing.T) {
	testenv.SkipUnlessSoak(t)
	testenv.Parallel(t)
	testEveryTaskOnce(t, 20000)
}

func testEveryTaskOnce(t *testing.T, n int) {
	c := newCluster(t)
	tg := newTarget(t)
	args := workerArgs(tg.URL, 30*time.Second, 64)
	c.start("s-1", args...)
	c.start("s-2", args...)
	testenv.WaitFor(t, 20*time.Second, "2 replicas own 8 each", func() (bool, string) { return c.settled("s-1", "s-2") })
	w1, w2 := c.startWorker("w-1", args...), c.startWorker("w-2", args...)

	ctx := testenv.Ctx(t, 3*time.Minute)
	var batch []client.Task
	for i := 0; i < n; i++ {
		batch = append(batch, client.Task{ID: "e" + strconv.Itoa(i), Queue: "default", Payload: []byte("x"), Delay: time.Duration(rand.IntN(3000)) * time.Millisecond})
		if len(batch) == 500 {
			if _, err := c.cli.EnqueueBatch(ctx, batch); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	testenv.WaitFor(t, 2*time.Minute, "every task delivered", func() (bool, string) {
		d, total := tg.delivered()
		return d == n, fmt.Sprintf("%d distinct, %d total", d, total)
	})
	// Every delivery acknowledged: nothing left in Redis.
	testenv.WaitFor(t, 30*time.Second, "all tasks acked and deleted", func() (bool, string) {
		left := 0
		for sh := 0; sh < nShards; sh++ {
			left += int(c.rdb.HLen(ctx, c.store.Layout().Tasks(sh)).Val())
		}
		return left == 0, fmt.Sprintf("%d tasks still stored", left)
	})
	// Exactly once, but for deliveries whose lease was lost.
	lost := leasesLost(t, ctx, w1, w2)
	d, total := tg.delivered()
	if d != n || float64(total-n) > lost {
		t.Fatalf("%d distinct ids delivered %d times, want %d exactly once but for %v deliveries whose lease was lost", d, total, n, lost)
	}
	h, err := promread.Scrape(ctx, "hourglass_worker_lateness_seconds", "http://"+w1.http+"/metrics", "http://"+w2.http+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	// Every handler start is observed once, on the worker that ran it: a
	// start for each delivery the target received, and at most one more
	// for each lost lease (whose handler may end before its request).
	if h.Count < uint64(total) || float64(h.Count) > float64(n)+lost {
		t.Fatalf("handler-start lateness histogram counted %d starts, the target received %d deliveries of %d tasks, %v leases lost", h.Count, total, n, lost)
	}
	tg.mu.Lock()
	p50, p99 := percentile(tg.late, 0.5), percentile(tg.late, 0.99)
	tg.mu.Unlock()
	t.Logf("lateness at handler start over %d tasks (%v leases lost): worker metric (pop - due, worker clock) p50 %.1fms p99 %.1fms; "+
		"HTTP target (receive - due) p50 %s p99 %s (race-enabled binaries; no bar asserted)",
		h.Count, lost, 1000*h.Quantile(0.5), 1000*h.Quantile(0.99), p50, p99)
}

// TestPrefetchEndToEnd: a scheduler with scheduler.prefetch moves tasks
// ahead of their due time and the worker binary holds them: every task is
// delivered once and none reaches its target before it is due, while
// the worker reports held deliveries (without the scheduler's prefetch it
// would hold none; without the hold, targets would see tasks early).
func TestPrefetchEndToEnd(t *testing.T) {
	testenv.Parallel(t)
	c := newCluster(t)
	tg := newTarget(t)
	args := workerArgs(tg.URL, 30*time.Second, 64)
	c.start("pf-1", append(args, "-set", "scheduler.prefetch=250ms")...)
	testenv.WaitFor(t, 20*time.Second, "one replica owns all 16 shards", func() (bool, string) { return c.settled("pf-1") })
	w := c.startWorker("pf-w", args...)

	ctx := testenv.Ctx(t, 2*time.Minute)
	n := 0 // tasks enqueued
	wave := func(size int) {
		t.Helper()
		var batch []client.Task
		for i := 0; i < size; i++ {
			batch = append(batch, client.Task{ID: "pf" + strconv.Itoa(n), Queue: "default", Payload: []byte("x"),
				Delay: time.Second + time.Duration(rand.IntN(2000))*time.Millisecond})
			n++
		}
		if _, err := c.cli.EnqueueBatch(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	held := func() float64 {
		t.Helper()
		fams, err := promread.Families(ctx, "http://"+w.http+"/metrics")
		if err != nil {
			t.Fatal(err)
		}
		h, err := promread.Counter(fams, "hourglass_worker_held_total")
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	wave(300)
	// A task is held when the worker pops it before its due time, which
	// the scheduler's 250 ms of prefetch allows; on a machine loaded past
	// that (the race detector, other tests) a whole wave can be popped
	// late. Another wave follows until one task was held.
	testenv.WaitFor(t, time.Minute, "a task moved ahead and held by the worker", func() (bool, string) {
		if d, _ := tg.delivered(); d < n {
			return false, fmt.Sprintf("%d of %d delivered", d, n)
		}
		if held() > 0 {
			return true, ""
		}
		wave(100)
		return false, "a wave delivered, none held: another wave"
	})
	testenv.WaitFor(t, 30*time.Second, "every task delivered", func() (bool, string) {
		d, total := tg.delivered()
		return d == n, fmt.Sprintf("%d of %d distinct, %d total", d, n, total)
	})
	// Each once, but for deliveries whose lease was lost (a claim that
	// missed its deadline on a loaded machine: at least once).
	if d, total := tg.delivered(); float64(total-n) > leasesLost(t, ctx, w) {
		t.Fatalf("%d distinct ids delivered %d times, want each once (but for lost leases)", d, total)
	}
	tg.mu.Lock()
	early := 0
	for _, l := range tg.late {
		if l < 0 {
			early++
		}
	}
	p50, p99, first := percentile(tg.late, 0.5), percentile(tg.late, 0.99), percentile(tg.late, 0)
	tg.mu.Unlock()
	if early > 0 {
		t.Fatalf("%d of %d tasks reached their target before their due time (earliest %s)", early, n, -first)
	}
	heldTasks := held()
	t.Logf("prefetch 250ms: %v of %d tasks held; receive - due p50 %s p99 %s (no bar asserted)", heldTasks, n, p50, p99)
}

// TestWorkerKilledTasksRedelivered: a worker SIGKILLed while its handlers
// run loses nothing: every task it held is delivered again, to the other
// worker: after its lease if the tasks were leased first (lease_after 0),
// or through recovery's check for popped, unsettled tasks if the worker ran
// them before leasing them (lease_after 500ms, killed before that).
func TestWorkerKilledTasksRedelivered(t *testing.T) {
	testenv.Parallel(t)
	for _, c := range []struct {
		name       string
		leaseAfter time.Duration
	}{{"leased first", 0}, {"run before a lease", 500 * time.Millisecond}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			testWorkerKilled(t, c.leaseAfter)
		})
	}
}

func testWorkerKilled(t *testing.T, leaseAfter time.Duration) {
	c := newCluster(t)
	tg := newTarget(t)
	const lease = 2 * time.Second
	args := append(workerArgs(tg.URL, lease, 8), "-set", fmt.Sprintf("queues.default.lease_after=%s", leaseAfter))
	c.start("k-s", args...)
	testenv.WaitFor(t, 20*time.Second, "replica owns all shards", func() (bool, string) { return c.settled("k-s") })

	// The doomed worker's requests hang until it is killed.
	release := make(chan struct{})
	var doomedMu sync.Mutex
	doomed := map[string]bool{}
	tg.mu.Lock()
	tg.behave = func(w http.ResponseWriter, r *http.Request, id string, attempt int) bool {
		if attempt == 1 {
			doomedMu.Lock()
			doomed[id] = true
			doomedMu.Unlock()
			select {
			case <-release:
			case <-r.Context().Done():
			}
			http.Error(w, "too late", http.StatusServiceUnavailable)
			return true
		}
		return false
	}
	tg.mu.Unlock()
	defer close(release)

	w1 := c.startWorker("k-w1", args...)
	ctx := testenv.Ctx(t, time.Minute)
	for i := 0; i < 8; i++ {
		if _, err := c.cli.Enqueue(ctx, client.Task{ID: fmt.Sprintf("k%d", i), Queue: "default"}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitFor(t, 20*time.Second, "w1 runs all 8 handlers", func() (bool, string) {
		doomedMu.Lock()
		defer doomedMu.Unlock()
		return len(doomed) == 8, fmt.Sprint(len(doomed))
	})
	// Which path is under test: leased tasks, or ones the worker runs
	// before leasing them (when the machine is too slow to kill it within
	// lease_after, some may be leased already; both paths must hold).
	unleased := 0
	for i := 0; i < 8; i++ {
		if info, err := c.cli.Lookup(ctx, fmt.Sprintf("k%d", i)); err == nil && info.State == client.StateActive && info.LeaseDeadline.IsZero() {
			unleased++
		}
	}
	w1.Kill()
	killed := time.Now()
	if leaseAfter == 0 && unleased != 0 {
		t.Fatalf("%d tasks ran without a lease with lease_after 0", unleased)
	}
	if leaseAfter > 0 && unleased == 0 {
		// Every task was leased within lease_after of its start: this run
		// would only repeat the leased case.
		t.Fatalf("no task was still unleased when the worker was killed (lease_after %s)", leaseAfter)
	}
	t.Logf("killed the worker with %d of 8 tasks not leased yet", unleased)
	c.startWorker("k-w2", args...)
	testenv.WaitFor(t, 30*time.Second, "all 8 delivered again", func() (bool, string) {
		tg.mu.Lock()
		defer tg.mu.Unlock()
		again := 0
		for i := 0; i < 8; i++ {
			if tg.count[fmt.Sprintf("k%d", i)] >= 2 {
				again++
			}
		}
		return again == 8, fmt.Sprintf("%d of 8", again)
	})
	t.Logf("all tasks of the SIGKILLed worker delivered again %s after the kill (lease %s)", time.Since(killed), lease)
	testenv.WaitFor(t, 10*time.Second, "all acked", func() (bool, string) {
		left := 0
		for sh := 0; sh < nShards; sh++ {
			left += int(c.rdb.HLen(ctx, c.store.Layout().Tasks(sh)).Val())
		}
		return left == 0, fmt.Sprint(left)
	})
	for i := 0; i < 8; i++ {
		info, err := c.cli.Lookup(ctx, fmt.Sprintf("k%d", i))
		if err == nil {
			t.Errorf("k%d still stored: %+v", i, info)
		}
	}
}

// TestPausedWorkerRunsNothingItLost: a worker process stopped (SIGSTOP)
// right after a pop, while recovery re-delivers what it popped to another
// worker, must not run those tasks when it continues: each task runs
// exactly once, on the other worker. The stopped worker is built with
// the faultinject tag (testenv.BuildFaultBinary) and stops itself after
// its first pop that returned tasks (HG_FAULT=stop-after-pop).
func TestPausedWorkerRunsNothingItLost(t *testing.T) {
	testenv.Parallel(t)
	c := newCluster(t)
	paused, other := newTarget(t), newTarget(t)
	const n = 6
	args := workerArgs(other.URL, 5*time.Second, 8)
	c.start("p-s", append(args, "-set", "scheduler.strand_check=500ms")...)
	testenv.WaitFor(t, 20*time.Second, "replica owns all shards", func() (bool, string) { return c.settled("p-s") })
	wa := c.spawn("p-wa", testenv.BuildFaultBinary(t, "./cmd/worker"), workerArgs(paused.URL, 5*time.Second, 8), []string{"HG_FAULT=stop-after-pop"})
	ctx := testenv.Ctx(t, time.Minute)
	for i := 0; i < n; i++ {
		if _, err := c.cli.Enqueue(ctx, client.Task{ID: fmt.Sprintf("p%d", i), Queue: "default"}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitFor(t, 20*time.Second, "worker a stopped itself after a pop", func() (bool, string) { return wa.Stopped(), "running" })
	stopped := time.Now()
	c.startWorker("p-wb", args...)
	testenv.WaitFor(t, 30*time.Second, "every task run on worker b", func() (bool, string) {
		d, _ := other.delivered()
		return d == n, fmt.Sprint(d)
	})
	wa.Resume()
	t.Logf("worker a resumed %v after it stopped; worker b had run all %d tasks", time.Since(stopped).Round(time.Millisecond), n)
	var dropped float64
	testenv.WaitFor(t, 20*time.Second, "worker a drops what it popped (or runs it)", func() (bool, string) {
		if _, ran := paused.delivered(); ran > 0 {
			return true, ""
		}
		fams, err := promread.Families(ctx, "http://"+wa.http+"/metrics")
		if err != nil {
			return false, err.Error()
		}
		dropped, err = promread.Counter(fams, "hourglass_worker_dropped_total")
		if err != nil {
			return false, err.Error()
		}
		return dropped > 0, fmt.Sprint(dropped)
	})
	if _, ran := paused.delivered(); ran > 0 {
		t.Errorf("worker a ran %d tasks after it continued; recovery had given them to worker b", ran)
	}
	other.mu.Lock()
	defer other.mu.Unlock()
	for i := 0; i < n; i++ {
		if id := fmt.Sprintf("p%d", i); other.count[id] != 1 {
			t.Errorf("%s ran %d times on worker b", id, other.count[id])
		}
	}
	t.Logf("worker a dropped %v popped tasks without running them", dropped)
}
