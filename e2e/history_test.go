package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestQueueHistoryCharts: a short run of real binaries (a scheduler, a
// worker calling an HTTP target that fails some tasks) and a producer in
// the test; the queue page's charts, read in headless Chromium, sum to
// the counts the test produced.
func TestQueueHistoryCharts(t *testing.T) {
	testenv.Parallel(t)
	testQueueHistory(t, 0)
}

// historyCounts are the counts a run produced, as the page names them.
type historyCounts map[string]uint64

func testQueueHistory(t *testing.T, run time.Duration) {
	bctx := browser(t)
	c := newCluster(t)
	tg := newTarget(t)
	tg.setBehave(func(w http.ResponseWriter, _ *http.Request, id string, attempt int) bool {
		if strings.HasPrefix(id, "bad-") || (strings.HasPrefix(id, "flaky-") && attempt == 1) {
			http.Error(w, "partner down", http.StatusBadGateway)
			return true
		}
		return false
	})
	args := append(workerArgs(tg.URL, 5*time.Second, 16), "-set", "queues.default.max_retries=1",
		"-set", "queues.default.backoff.base=100ms", "-set", "queues.default.backoff.cap=100ms")
	s := c.start("hist-s", args...)
	testenv.WaitFor(t, 20*time.Second, "the scheduler owns all shards", func() (bool, string) { return c.settled("hist-s") })
	c.startWorker("hist-w", args...)
	in, err := inspect.New(c.rdb, inspect.Config{Shards: nShards})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Ctx(t, run+3*time.Minute)
	start := time.Now()

	// The producer: each second a batch whose size follows the minute
	// (5, 20 or 35 tasks a second in turn): 10% fail every attempt (two
	// attempts, then dead), 10% fail their first, 5% are scheduled an hour
	// ahead and cancelled, the rest succeed at once.
	want := historyCounts{}
	var mu sync.Mutex
	add := func(k string, n int) { mu.Lock(); want[k] += uint64(n); mu.Unlock() }
	seconds := max(int(run/time.Second), 4)
	paused := false
	for i := range seconds {
		minute := i / 60
		if run > 0 && minute == 4 && !paused { // the fifth minute: paused, ready tasks pile up
			if err := in.Pause(ctx, "default"); err != nil {
				t.Fatal(err)
			}
			paused = true
		}
		if paused && minute == 5 {
			if err := in.Resume(ctx, "default"); err != nil {
				t.Fatal(err)
			}
			paused = false
		}
		n := 5 + 15*(minute%3)
		if run == 0 {
			n = 20
		}
		var tasks []client.Task
		var later []string
		for j := range n {
			id, kind := fmt.Sprintf("t-%d-%d", i, j), j%20
			task := client.Task{Queue: "default", Payload: []byte("x")}
			switch {
			case kind < 2:
				task.ID = "bad-" + id
				add("started", 2)
				add("retried", 1)
				add("dead", 1)
			case kind < 4:
				task.ID = "flaky-" + id
				add("started", 2)
				add("retried", 1)
				add("succeeded", 1)
			case kind == 4:
				task.ID, task.Delay = "later-"+id, time.Hour
				later = append(later, task.ID)
				add("cancelled", 1)
			default:
				task.ID = "ok-" + id
				add("started", 1)
				add("succeeded", 1)
			}
			tasks = append(tasks, task)
		}
		if _, err := c.cli.EnqueueBatch(ctx, tasks); err != nil {
			t.Fatal(err)
		}
		add("enqueued", len(tasks))
		for _, id := range later {
			if _, err := c.cli.Cancel(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case <-time.After(time.Until(start.Add(time.Duration(i+1) * time.Second))):
		case <-ctx.Done():
			t.Fatal("the producer ran out of time")
		}
	}
	if err := c.cli.Close(ctx); err != nil { // the producer's counts, now
		t.Fatal(err)
	}
	t.Logf("produced over %s: %v", time.Since(start).Round(time.Second), want)

	// The worker writes its counts a few seconds after them.
	since := time.Hour
	testenv.WaitFor(t, time.Minute, "the history's totals", func() (bool, string) {
		got, err := historyTotals(ctx, in, since)
		return err == nil && fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprint(got, err)
	})

	page := fmt.Sprintf("http://%s/ui/queue.html?queue=default", s.http)
	step(t, bctx, "open the queue page", chromedp.Navigate(page), chromedp.WaitVisible(`#throughput canvas`))
	shown := value(t, bctx, "read the totals the charts sum to", chromedp.Poll[string](`(() => {
		const out = [];
		for (const td of document.querySelectorAll("#totals td[data-col]")) {
			if (td.textContent === "") return "";
			out.push(td.dataset.col + "=" + td.textContent);
		}
		return out.join(" ");
	})()`))
	for k, v := range want {
		if !strings.Contains(" "+shown+" ", " "+k+"="+strconv.FormatUint(v, 10)+" ") {
			t.Errorf("page shows %q; want %s=%d", shown, k, v)
		}
	}
	charts := value(t, bctx, "count the charts", chromedp.Poll[int](`document.querySelectorAll(".chart canvas").length`))
	if charts != 3 {
		t.Errorf("%d charts drawn, want 3", charts)
	}
	if path := os.Getenv("HGTEST_SCREENSHOT_HISTORY"); path != "" {
		png := value(t, bctx, "screenshot", chromedp.FullScreenshot(100))
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if run > 0 {
		h, err := in.QueueHistory(ctx, "default", start, time.Now(), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		var ready uint64
		for _, s := range h {
			ready = max(ready, s.Ready)
		}
		if ready == 0 || ready > want["enqueued"] {
			t.Errorf("the paused minute's ready tasks sampled as %d (of %d enqueued)", ready, want["enqueued"])
		}
	}
	logHistoryMemory(ctx, t, c)
}

// historyTotals sums the queue's history over the last since.
func historyTotals(ctx context.Context, in *inspect.Inspector, since time.Duration) (historyCounts, error) {
	h, err := in.QueueHistory(ctx, "default", time.Now().Add(-since), time.Now(), since)
	if err != nil {
		return nil, err
	}
	var sum inspect.QueueStats
	for _, s := range h {
		sum.Add(s)
	}
	got := historyCounts{}
	for k, v := range map[string]uint64{"enqueued": sum.Enqueued, "started": sum.Started, "succeeded": sum.Succeeded,
		"retried": sum.Retried, "dead": sum.Dead, "cancelled": sum.Cancelled} {
		if v > 0 {
			got[k] = v
		}
	}
	return got, nil
}

// logHistoryMemory logs the Redis memory of the queue's history keys and
// what seven days of them take.
func logHistoryMemory(ctx context.Context, t *testing.T, c *cluster) {
	keys, err := c.rdb.Keys(ctx, "{hourglass}:qhist:default:*").Result()
	if err != nil || len(keys) == 0 {
		t.Errorf("history keys: %v %v", keys, err)
		return
	}
	var total int64
	for _, k := range keys {
		n, err := c.rdb.MemoryUsage(ctx, k).Result()
		if err != nil {
			t.Errorf("MEMORY USAGE %s: %v", k, err)
			return
		}
		total += n
	}
	per := total / int64(len(keys))
	t.Logf("history memory: %d bytes in %d day key(s), %d a day: at most 8 days kept, %d bytes (%.2f MB)", total, len(keys), per, 8*per, float64(8*per)/1e6)
}
