package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/coord"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// enqueueNow enqueues n tasks due now with ids prefix0..prefix(n-1).
func (c *cluster) enqueueNow(t *testing.T, prefix string, n int) {
	t.Helper()
	ctx := testenv.Ctx(t, time.Minute)
	var batch []client.Task
	for i := 0; i < n; i++ {
		batch = append(batch, client.Task{ID: fmt.Sprintf("%s%d", prefix, i), Queue: "default"})
		if len(batch) == 500 || i == n-1 {
			if _, err := c.cli.EnqueueBatch(ctx, batch); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
}

// TestClusterWideConcurrencyCap: three worker processes, max_concurrency
// 5 on the queue, 200 tasks of 50 ms (40 rounds of the cap): the target
// never sees more than 5 requests at once, and every task completes.
func TestClusterWideConcurrencyCap(t *testing.T) {
	testenv.Parallel(t)
	c := newCluster(t)
	tg := newTarget(t)
	var running, most atomic.Int32
	tg.setBehave(func(w http.ResponseWriter, r *http.Request, id string, attempt int) bool {
		n := running.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(50 * time.Millisecond) // the handler's work
		running.Add(-1)
		return false
	})
	args := append(workerArgs(tg.URL, 30*time.Second, 10), "-set", "queues.default.max_concurrency=5")
	c.start("fc-s", args...)
	testenv.WaitFor(t, 20*time.Second, "replica owns all shards", func() (bool, string) { return c.settled("fc-s") })
	for i := 1; i <= 3; i++ {
		c.startWorker(fmt.Sprintf("fc-w%d", i), args...)
	}
	start := time.Now()
	const n = 200
	c.enqueueNow(t, "fc", n)
	testenv.WaitFor(t, 60*time.Second, "200 tasks delivered", func() (bool, string) {
		d, total := tg.delivered()
		return d == n, fmt.Sprintf("%d distinct, %d total", d, total)
	})
	took := time.Since(start)
	t.Logf("%d tasks of 50ms through 3 workers capped at 5: most at once %d, took %s (ideal %s)", n, most.Load(), took, n*50*time.Millisecond/5)
	if m := most.Load(); m > 5 {
		t.Fatalf("%d requests ran at once, cap is 5", m)
	}
	if m := most.Load(); m < 2 {
		t.Fatalf("at most %d at once: the cap starved the workers", m)
	}
}

// TestKilledWorkerPermitsReturnAfterLease: permits held by a SIGKILLed
// worker stay taken until their lease runs out, then serve another worker.
func TestKilledWorkerPermitsReturnAfterLease(t *testing.T) {
	testenv.Parallel(t)
	c := newCluster(t)
	tg := newTarget(t)
	const lease = 3 * time.Second
	hold := make(chan struct{})
	defer close(hold)
	tg.setBehave(func(w http.ResponseWriter, r *http.Request, id string, attempt int) bool {
		if id == "held0" || id == "held1" {
			select {
			case <-hold:
			case <-r.Context().Done():
			}
			http.Error(w, "gone", http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	args := append(workerArgs(tg.URL, lease, 4), "-set", "queues.default.max_concurrency=2")
	c.start("kp-s", args...)
	testenv.WaitFor(t, 20*time.Second, "replica owns all shards", func() (bool, string) { return c.settled("kp-s") })
	a := c.startWorker("kp-a", args...)
	c.enqueueNow(t, "held", 2)
	testenv.WaitFor(t, 20*time.Second, "worker A holds both permits", func() (bool, string) {
		d, _ := tg.delivered()
		return d == 2, fmt.Sprint(d)
	})
	sem, err := coord.NewSemaphore(c.rdb, "hourglass:flow:default", 2, lease)
	if err != nil {
		t.Fatal(err)
	}
	a.Kill()
	killed := time.Now()
	if n, err := sem.InUse(context.Background()); err != nil || n != 2 {
		t.Fatalf("permits in use right after the kill: %d %v, want 2", n, err)
	}
	c.startWorker("kp-b", args...)
	c.enqueueNow(t, "probe", 1)
	testenv.WaitFor(t, 30*time.Second, "probe delivered once permits expired", func() (bool, string) {
		tg.mu.Lock()
		defer tg.mu.Unlock()
		return tg.count["probe0"] == 1, ""
	})
	tg.mu.Lock()
	waited := tg.first["probe0"].Sub(killed)
	tg.mu.Unlock()
	t.Logf("probe ran %s after the holder was killed (permit lease %s, refreshed every %s)", waited, lease, lease/3)
	// The permits were last refreshed at most lease/3 before the kill.
	if floor := lease - lease/3 - 200*time.Millisecond; waited < floor {
		t.Fatalf("probe ran %s after the kill: the dead worker's permits were reused before their lease (>= %s)", waited, floor)
	}
}

// TestClusterWideRateLimit: three worker processes share rate 200/s,
// burst 20: over 5 s the dispatches stay within the limit.
func TestClusterWideRateLimit(t *testing.T) {
	testenv.Parallel(t)
	c := newCluster(t)
	tg := newTarget(t)
	args := append(workerArgs(tg.URL, 30*time.Second, 20),
		"-set", "queues.default.rate_limit.rate=200", "-set", "queues.default.rate_limit.burst=20")
	c.start("rl-s", args...)
	testenv.WaitFor(t, 20*time.Second, "replica owns all shards", func() (bool, string) { return c.settled("rl-s") })
	c.enqueueNow(t, "rl", 1500) // more than the window's allowance
	for i := 1; i <= 3; i++ {
		c.startWorker(fmt.Sprintf("rl-w%d", i), args...)
	}
	testenv.WaitFor(t, 30*time.Second, "first dispatch", func() (bool, string) {
		return len(tg.arrived()) > 0, ""
	})
	first := tg.arrived()[0]
	const window = 5 * time.Second
	testenv.WaitFor(t, window+10*time.Second, "5 s of dispatches", func() (bool, string) {
		return time.Since(first) > window+100*time.Millisecond, ""
	})
	n := 0
	for _, ts := range tg.arrived() {
		if ts.Sub(first) < window {
			n++
		}
	}
	// The limiter admits on Redis's clock; the target sees arrivals, one
	// request latency later. If the first arrival was slower than later
	// ones (a cold connection), the arrival window spans a little more than
	// 5 s of admissions: allow 100 ms of such skew (20 requests). Without
	// the limiter three workers of concurrency 20 dispatch thousands per
	// second.
	limit := 200*int(window/time.Second) + 20
	slack := 200 / 10
	t.Logf("rate 200/s burst 20 over three workers: %d dispatches in the first %s (limit %d, %.0f/s)", n, window, limit, float64(n)/window.Seconds())
	if n > limit+slack {
		t.Fatalf("%d dispatches in %s exceed rate 200/s + burst 20 = %d (+%d for latency skew)", n, window, limit, slack)
	}
	// Starvation, without a throughput bar (the race detector and the
	// tests beside this one load the machine): the limiter lets every
	// task through, 1,500 at 200/s in about 8 s, well within a minute.
	testenv.WaitFor(t, time.Minute, "every task dispatched", func() (bool, string) {
		d, total := tg.delivered()
		return d == 1500, fmt.Sprintf("%d distinct, %d total", d, total)
	})
}

// TestQueueLimitChangedAtRunTime: two worker processes consume a queue
// under a rate limit too high to matter; `hourglass queue limit` sets 2
// per second: tasks due 1 s after the command returned start no faster
// than that, across both workers; `--clear` gives the workers their own
// limit back.
func TestQueueLimitChangedAtRunTime(t *testing.T) {
	testenv.Parallel(t)
	c := newCluster(t)
	tg := newTarget(t)
	args := append(workerArgs(tg.URL, 30*time.Second, 10), "-set", "queues.default.rate_limit.rate=1000", "-set", "queues.default.rate_limit.burst=1000")
	c.start("lim-s", args...)
	testenv.WaitFor(t, 20*time.Second, "replica owns all shards", func() (bool, string) { return c.settled("lim-s") })
	c.startWorker("lim-w1", args...)
	c.startWorker("lim-w2", args...)
	cli := newCLI(t, c)
	if out, errOut, code := cli.run("queue", "limit", "default", "--rate", "2", "--burst", "1"); code != 0 {
		t.Fatalf("queue limit: exit %d: %s %s", code, out, errOut)
	}
	// Due 1 s after the change: the workers must have applied it by then.
	ctx := testenv.Ctx(t, time.Minute)
	var batch []client.Task
	for i := range 8 {
		batch = append(batch, client.Task{ID: fmt.Sprintf("slow%d", i), Queue: "default", Delay: time.Second})
	}
	if _, err := c.cli.EnqueueBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "8 tasks delivered", func() (bool, string) {
		d, _ := tg.delivered()
		return d == 8, fmt.Sprint(d)
	})
	starts := tg.arrived()
	for i := range starts {
		for j := i + 1; j < len(starts); j++ {
			// 2 per second, burst 1, and 400 ms for the starts' own jitter.
			if span, n := starts[j].Sub(starts[i]), j-i+1; float64(n) > 1+2*(span+400*time.Millisecond).Seconds() {
				t.Errorf("%d starts within %v at 2 per second", n, span.Round(time.Millisecond))
			}
		}
	}
	t.Logf("8 tasks at 2 per second set at run time: started over %v", starts[len(starts)-1].Sub(starts[0]).Round(time.Millisecond))
	if out, errOut, code := cli.run("queue", "limit", "default", "--clear"); code != 0 {
		t.Fatalf("queue limit --clear: exit %d: %s %s", code, out, errOut)
	}
	// 30 tasks: 15 s at 2 per second; at the workers' own 1,000 a moment.
	c.enqueueNow(t, "fast", 30)
	testenv.WaitFor(t, 8*time.Second, "30 tasks delivered at the workers' own rate", func() (bool, string) {
		d, _ := tg.delivered()
		return d == 38, fmt.Sprint(d)
	})
}
