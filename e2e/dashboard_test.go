package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/testenv"
	"github.com/hourglass-sched/hourglass/periodic"
)

// browser starts headless Chromium for the test. Without chromium on the
// PATH it skips, unless HGTEST_BROWSER is set (CI sets it):
// then the test fails.
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("HGTEST_BROWSER") != "" {
			t.Fatal("chromium not found (HGTEST_BROWSER is set): run scripts/install-deps.sh")
		}
		t.Skip("chromium not found; scripts/install-deps.sh installs it")
	}
	// Chromium keeps its profile, and (with disable-dev-shm-usage) its
	// shared memory in org.chromium.Chromium.* under TMPDIR: both go in
	// the test's directory, which the test removes, not in /tmp, where a
	// browser that did not exit cleanly left them behind.
	dir := t.TempDir()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1280, 1000),
		chromedp.UserDataDir(filepath.Join(dir, "profile")), chromedp.Env("TMPDIR="+dir))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// Start the browser on ctx itself: a browser started by a step would
	// live only as long as that step's deadline context.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// step runs browser actions with a deadline.
func step(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(sctx, actions...); err != nil {
		t.Fatalf("browser: %s: %v", what, err)
	}
}

// click clicks the element sel. The page redraws a table when its data
// changes, so the node found may be replaced before the click lands
// ("Could not find node"): then it looks sel up again, up to three times.
// A click that reached the page is never repeated.
func click(t *testing.T, ctx context.Context, what, sel string) {
	t.Helper()
	var err error
	for range 3 {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = chromedp.Do(sctx, chromedp.WaitVisible(sel), chromedp.Click(sel))
		cancel()
		if err == nil || !strings.Contains(err.Error(), "Could not find node") {
			break
		}
	}
	if err != nil {
		t.Fatalf("browser: %s: %v", what, err)
	}
}

// value runs one browser action that returns a value, with a deadline.
func value[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(sctx, a)
	if err != nil {
		t.Fatalf("browser: %s: %v", what, err)
	}
	return v
}

// text reads the text of the element sel for a WaitFor condition: a
// node the page redrew while it was read ("No node with given id
// found") is not an answer yet, so the error is the condition's detail,
// not the test's end.
func text(ctx context.Context, sel string) (string, error) {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return chromedp.Run(sctx, chromedp.Text(sel))
}

// dialogs answers the JavaScript dialogs (the page's confirmations) of
// the browser's tab and records their messages.
type dialogs struct {
	mu      sync.Mutex
	asked   []string
	dismiss bool // answer Cancel instead of OK
}

// answerDialogs starts answering the dialogs of bctx's tab: OK, or Cancel
// while setDismiss(true).
func answerDialogs(t *testing.T, bctx context.Context) *dialogs {
	t.Helper()
	d := &dialogs{}
	ctx, cancel := context.WithCancel(bctx)
	opening := chromedp.Events(ctx, page.JavascriptDialogOpening)
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ev, err := range opening {
			if err != nil {
				return
			}
			d.mu.Lock()
			d.asked = append(d.asked, ev.Message)
			accept := !d.dismiss
			d.mu.Unlock()
			// The dialog blocks the page (and the click that opened it)
			// until it is answered.
			if _, err := chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: accept}); err != nil && ctx.Err() == nil {
				t.Errorf("answer the dialog %q: %v", ev.Message, err)
			}
		}
	}()
	return d
}

func (d *dialogs) setDismiss(v bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dismiss = v
}

// count returns how many dialogs were asked.
func (d *dialogs) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.asked)
}

// confirmClick clicks sel, a button that asks for confirmation, and
// returns the dialog's message. A click that opened no dialog reached no
// button (the table was redrawn under it, the node replaced after it was
// found): nothing happened, so it clicks again, up to three times.
func confirmClick(t *testing.T, ctx context.Context, d *dialogs, what, sel string) string {
	t.Helper()
	n := d.count()
	for range 3 {
		click(t, ctx, what, sel)
		deadline := time.Now().Add(5 * time.Second)
		for d.count() == n && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond) // polls a condition, with a deadline
		}
		if d.count() > n {
			return d.last()
		}
	}
	t.Fatalf("browser: %s: no confirmation asked after three clicks", what)
	return ""
}

// last returns the message of the last dialog ("" if none).
func (d *dialogs) last() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.asked) == 0 {
		return ""
	}
	return d.asked[len(d.asked)-1]
}

// TestDashboardInBrowser: a real scheduler serves the dashboard; headless
// Chromium shows the shard layout, the queue the test created and the
// scheduler's periodic
// schedule with its last occurrence, its Replay button brings a dead task
// back and the worker delivers it, its Pause buttons pause the schedule
// and the queue. Every button asks for confirmation first: declined, the
// page changes nothing and says so; accepted, it acts.
func TestDashboardInBrowser(t *testing.T) {
	testenv.Parallel(t)
	bctx := browser(t)
	asked := answerDialogs(t, bctx)
	c := newCluster(t)
	tg := newTarget(t)
	tg.setBehave(func(w http.ResponseWriter, _ *http.Request, id string, _ int) bool {
		if strings.HasPrefix(id, "bad-") {
			http.Error(w, "partner down", http.StatusBadGateway)
			return true
		}
		return false
	})
	args := append(workerArgs(tg.URL, 5*time.Second, 4), "-set", "queues.default.max_retries=0", "-set", "queues.default.retention=1h")
	s := c.start("ui-s", slices.Concat(args, []string{"-set", "periodic.tick.queue=default", "-set", "periodic.tick.interval=1s"})...)
	testenv.WaitFor(t, 20*time.Second, "replica owns all shards", func() (bool, string) { return c.settled("ui-s") })
	c.startWorker("ui-w", args...)
	in, err := inspect.New(c.rdb, inspect.Config{Shards: nShards})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Ctx(t, 2*time.Minute)
	for _, id := range []string{"bad-1", "bad-2"} {
		if _, err := c.cli.Enqueue(ctx, client.Task{ID: id, Queue: "default", Payload: []byte("order " + id)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		if _, err := c.cli.Enqueue(ctx, client.Task{ID: fmt.Sprintf("later-%d", i), Queue: "default", Delay: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitFor(t, 20*time.Second, "two dead letters", func() (bool, string) {
		q, err := in.Queue(ctx, "default")
		return err == nil && q.Counts.Dead == 2, fmt.Sprintf("%+v %v", q.Counts, err)
	})
	tg.setBehave(nil) // the partner is back

	url := "http://" + s.http + "/"
	step(t, bctx, "open the dashboard and see the queue", chromedp.Navigate(url),
		chromedp.WaitVisible(`#queues tr[data-queue="default"]`),
		chromedp.WaitVisible(`#dead button[data-action="replay"][data-id="bad-1"]`))
	layout := value(t, bctx, "read the layout", chromedp.Poll[string](`(() => {
		const p = document.querySelector("#layout");
		return p && p.textContent ? p.textContent : "";
	})()`))
	if want := fmt.Sprintf("generation 0, %d shards, stable (never resized)", nShards); layout != want {
		t.Fatalf("layout %q, want %q", layout, want)
	}
	// The processes: the scheduler, and the worker with its slots.
	step(t, bctx, "see the processes", chromedp.WaitVisible(`#processes tr[data-process="ui-s"]`),
		chromedp.WaitVisible(`#processes tr[data-role="worker"] td[data-col="busy"]`))
	testenv.WaitFor(t, 10*time.Second, "the worker's slots in the processes' table", func() (bool, string) {
		busy, err := text(bctx, `#processes tr[data-role="worker"] td[data-col="busy"]`)
		if err != nil {
			return false, err.Error()
		}
		return strings.HasSuffix(busy, "/4"), busy
	})
	// Times as the CLI shows them: 24-hour, with the zone's offset.
	if started := value(t, bctx, "read the scheduler's start", chromedp.Text(`#processes tr[data-process="ui-s"] td:nth-child(6)`)); !regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} [+-]\d\d:\d\d$`).MatchString(started) {
		t.Fatalf("the scheduler's start shown as %q", started)
	}
	cells := value(t, bctx, "read the queue's row", chromedp.Text(`#queues tr[data-queue="default"]`))
	if !strings.Contains(cells, "default") || !strings.Contains(cells, "active") || !strings.Contains(cells, "1h, 10,000 a shard") {
		t.Fatalf("queue row %q, want the queue, active, its retention (1h, 10,000 a shard)", cells)
	}
	// Limits set at run time show in the queue's row, and its button
	// clears them.
	if err := in.SetQueueLimits(ctx, "default", inspect.QueueLimits{Rate: 50, Burst: 10}); err != nil {
		t.Fatal(err)
	}
	limits := `#queues tr[data-queue="default"] td[data-col="limits"]`
	value(t, bctx, "see the limits", chromedp.Poll[bool](`document.querySelector('`+limits+`').textContent === "50 per 1s by token_bucket, burst 10"`))
	if got := confirmClick(t, bctx, asked, "click Clear limits", `#queues button[data-action="unlimit"][data-queue="default"]`); !strings.HasPrefix(got, "Clear the limits set at run time on queue default?") {
		t.Fatalf("clear limits asked %q", got)
	}
	value(t, bctx, "see the limits cleared", chromedp.Poll[bool](`document.querySelector('`+limits+`').textContent === "-"`))
	if q, err := in.Queue(ctx, "default"); err != nil || q.Limits != nil {
		t.Fatalf("limits after Clear limits: %+v, %v", q.Limits, err)
	}
	// The schedule's row, once the page has drawn a last occurrence (the
	// schedule fires every second; the page refreshes every 3 s).
	value(t, bctx, "see the schedule fired", chromedp.Poll[string](`(() => {
		const c = document.querySelector('#schedules tr[data-schedule="tick"] td[data-col="last"]');
		return c && c.textContent !== "-" ? c.textContent : "";
	})()`))
	if path := os.Getenv("HGTEST_SCREENSHOT"); path != "" {
		png := value(t, bctx, "screenshot", chromedp.CaptureScreenshot())
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	if got := confirmClick(t, bctx, asked, "click Replay", `#dead button[data-action="replay"][data-id="bad-1"]`); !strings.HasPrefix(got, "Replay dead task bad-1?") {
		t.Fatalf("Replay asked %q", got)
	}
	testenv.WaitFor(t, 20*time.Second, "the replayed task delivered again and acked", func() (bool, string) {
		tg.mu.Lock()
		runs := tg.count["bad-1"]
		tg.mu.Unlock()
		tk, err := in.Task(ctx, "bad-1")
		return runs == 2 && err == nil && tk.State == inspect.StateSucceeded, fmt.Sprintf("%d runs, lookup: %v %v", runs, tk.State, err)
	})
	// The queue keeps records (retention 1h): the success is listed.
	step(t, bctx, "show the queue's recent completions", chromedp.SendKeys(`#recentqueue input[name="queue"]`, "default"),
		chromedp.Click(`#recentqueue button[type="submit"]`), chromedp.WaitVisible(`#recent tr[data-id="bad-1"]`))
	if row := value(t, bctx, "read the completion", chromedp.Text(`#recent tr[data-id="bad-1"]`)); !strings.Contains(row, "succeeded") {
		t.Fatalf("recent completion row %q", row)
	}
	if tk, err := in.Task(ctx, "bad-2"); err != nil || tk.State != inspect.StateDead {
		t.Fatalf("bad-2 should still be dead: %+v %v", tk, err)
	}
	// Purge all: every dead letter of the applied filter (none: all).
	if got := confirmClick(t, bctx, asked, "click Purge all", `#deadbulk button[data-action="purgeall"]`); !strings.HasPrefix(got, "Purge every dead letter (no filter: all of them)?") {
		t.Fatalf("Purge all asked %q", got)
	}
	value(t, bctx, "the bulk purge's count", chromedp.Poll[string](`(() => {
		const s = document.querySelector("#status").textContent;
		return s.includes("Purged 1 of 1 dead letters examined") ? s : "";
	})()`))
	if _, err := in.Task(ctx, "bad-2"); !errors.Is(err, inspect.ErrNotFound) {
		t.Fatalf("bad-2 after Purge all: %v", err)
	}

	// A key's weight: shown per queue, set by the form (0 would pause it).
	// Polled: the table is redrawn with each refresh that changed it (the
	// schedule fires every second), and a read in between finds no cell.
	if turns := value(t, bctx, "read the queue's turns", chromedp.Poll[string](`(() => {
		const c = document.querySelector('#queues tr[data-queue="default"] td[data-col="turns"]');
		return c && c.textContent ? c.textContent : "";
	})()`)); turns != "due order" {
		t.Fatalf("turns of a plain queue %q, want due order", turns)
	}
	step(t, bctx, "show the queue's key weights", chromedp.SendKeys(`#weightsqueue input[name="queue"]`, "default"),
		chromedp.Click(`#weightsqueue button[type="submit"]`), chromedp.WaitVisible(`#noweights`),
		chromedp.SendKeys(`#keyweight input[name="key"]`, "tenant-42"), chromedp.SendKeys(`#keyweight input[name="weight"]`, "3"))
	if got := confirmClick(t, bctx, asked, "click Set weight", `#keyweight button[type="submit"]`); !strings.HasPrefix(got, `Give key "tenant-42" of queue default 3 turns a round?`) {
		t.Fatalf("Set weight asked %q", got)
	}
	step(t, bctx, "see the weight listed", chromedp.WaitVisible(`#weights tr[data-key="tenant-42"]`))
	if w, err := in.KeyWeights(ctx, "default"); err != nil || w["tenant-42"] != 3 {
		t.Fatalf("weights after Set weight: %v, %v", w, err)
	}
	// A key's concurrency cap: set by its form, listed beside the weight.
	step(t, bctx, "type a key's cap", chromedp.SendKeys(`#keycap input[name="key"]`, "tenant-42"), chromedp.SendKeys(`#keycap input[name="cap"]`, "2"))
	if got := confirmClick(t, bctx, asked, "click Set cap", `#keycap button[type="submit"]`); !strings.HasPrefix(got, `Let at most 2 tasks of key "tenant-42" of queue default run at once?`) {
		t.Fatalf("Set cap asked %q", got)
	}
	step(t, bctx, "see the cap listed", chromedp.WaitVisible(`#weights tr[data-key="tenant-42"]`))
	testenv.WaitFor(t, 10*time.Second, "the cap in the keys' table", func() (bool, string) {
		cap, err := text(bctx, `#weights tr[data-key="tenant-42"] td:nth-child(3)`)
		if err != nil {
			return false, err.Error()
		}
		return cap == "2", cap
	})
	if c, err := in.KeyConcurrency(ctx, "default"); err != nil || c.Keys["tenant-42"] != 2 {
		t.Fatalf("caps after Set cap: %+v, %v", c, err)
	}
	// A key's rate: set by its form, listed in the rate column.
	step(t, bctx, "type a key's rate", chromedp.SendKeys(`#keyrate input[name="key"]`, "tenant-42"), chromedp.SendKeys(`#keyrate input[name="rate"]`, "5"),
		chromedp.SetValue(`#keyrate select[name="kind"]`, "sliding_window"))
	if got := confirmClick(t, bctx, asked, "click Set rate", `#keyrate button[type="submit"]`); !strings.HasPrefix(got, `Let at most 5 tasks of key "tenant-42" of queue default start per 1s by a sliding window?`) {
		t.Fatalf("Set rate asked %q", got)
	}
	testenv.WaitFor(t, 10*time.Second, "the rate in the keys' table", func() (bool, string) {
		rate, err := text(bctx, `#weights tr[data-key="tenant-42"] td:nth-child(4)`)
		if err != nil {
			return false, err.Error()
		}
		return strings.HasPrefix(rate, "5 per ") && strings.HasSuffix(rate, "by sliding window"), rate
	})
	if c, err := in.KeyConcurrency(ctx, "default"); err != nil || c.Rates["tenant-42"].Rate != 5 || c.Rates["tenant-42"].Kind != "sliding_window" {
		t.Fatalf("rates after Set rate: %+v, %v", c, err)
	}

	step(t, bctx, "look up a task", chromedp.SendKeys(`#lookup input[name="id"]`, "later-0"),
		chromedp.Click(`#lookup button[type="submit"]`), chromedp.WaitVisible(`#taskcancel`))
	if shown := value(t, bctx, "read the task", chromedp.Text(`#task`)); !strings.Contains(shown, `"id": "later-0"`) ||
		!strings.Contains(shown, `"state": "scheduled"`) {
		t.Fatalf("task lookup shows %q", shown)
	}
	step(t, bctx, "type a new due time", chromedp.WaitVisible(`#taskreschedule`), chromedp.SendKeys(`#taskreschedule input[name="at"]`, "3h"))
	if got := confirmClick(t, bctx, asked, "click Reschedule", `#taskreschedule button[type="submit"]`); !strings.HasPrefix(got, "Reschedule task later-0 to 3h?") {
		t.Fatalf("Reschedule asked %q", got)
	}
	testenv.WaitFor(t, 20*time.Second, "later-0 due in about 3 hours", func() (bool, string) {
		tk, err := in.Task(ctx, "later-0")
		return err == nil && time.Until(tk.Due) > 2*time.Hour, fmt.Sprintf("%v %v", tk.Due, err)
	})

	// The schedule's history: its occurrences fired every second.
	step(t, bctx, "show the schedule's history", chromedp.Click(`#schedules button[data-action="history"][data-schedule="tick"]`),
		chromedp.WaitVisible(`#schedhisttable tbody tr`))
	if row := value(t, bctx, "read the history", chromedp.Text(`#schedhisttable tbody tr`)); !strings.Contains(row, "fired") || !strings.Contains(row, "tick@") {
		t.Fatalf("the schedule's newest outcome %q", row)
	}

	if got := confirmClick(t, bctx, asked, "click the schedule's Pause", `#schedules button[data-action="pause"][data-schedule="tick"]`); !strings.HasPrefix(got, "Pause schedule tick?") {
		t.Fatalf("the schedule's Pause asked %q", got)
	}
	step(t, bctx, "see the schedule's Resume", chromedp.WaitVisible(`#schedules button[data-action="resume"][data-schedule="tick"]`))
	tick, err := periodic.Schedule{Name: "tick", Queue: "default", Interval: time.Second}.Compile()
	if err != nil {
		t.Fatal(err)
	}
	if ss, err := in.Schedules(ctx, []*periodic.Compiled{tick}, time.Now(), 0); err != nil || !ss[0].Paused || ss[0].LastFired.IsZero() {
		t.Fatalf("after the schedule's Pause: %+v %v", ss, err)
	}

	// Declined, Pause changes nothing; the status line says so.
	asked.setDismiss(true)
	confirmClick(t, bctx, asked, "click Pause and decline", `#queues button[data-action="pause"][data-queue="default"]`)
	value(t, bctx, "see the pause declined", chromedp.Poll[string](`(() => {
		const s = document.querySelector("#status").textContent;
		return s.includes("Pause not confirmed") ? s : "";
	})()`))
	if q, err := in.Queue(ctx, "default"); err != nil || q.State != inspect.QueueActive {
		t.Fatalf("after a declined Pause: %+v %v", q, err)
	}
	asked.setDismiss(false)
	if got := confirmClick(t, bctx, asked, "click Pause", `#queues button[data-action="pause"][data-queue="default"]`); !strings.HasPrefix(got, "Pause queue default?") {
		t.Fatalf("Pause asked %q", got)
	}
	step(t, bctx, "see Resume", chromedp.WaitVisible(`#queues button[data-action="resume"][data-queue="default"]`))
	if q, err := in.Queue(ctx, "default"); err != nil || q.State != inspect.QueuePaused {
		t.Fatalf("after Pause: %+v %v", q, err)
	}
}
