package e2e_test

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/dashboard"
	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestDashboardLayoutInBrowser: the Shards panel draws a change of the
// shard count. No scheduler runs, so the change stays where the test puts
// it: started (2 -> 4) it shows resharding with its progress bar and the
// four shards; with every shard recorded done (the owners' part) it shows
// the stable layout and hides the bar, and the header the new count.
func TestDashboardLayoutInBrowser(t *testing.T) {
	testenv.Parallel(t)
	bctx := browser(t)
	e := shardtest.New(t, shardtest.Options{Namespace: "uil", Shards: 2})
	e.Schedule(shardtest.Queue, time.Hour, "a1", "a2", "a3")
	in, err := inspect.New(e.RDB, inspect.Config{Namespace: "uil", Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(dashboard.New(dashboard.Options{Inspector: in, ReadOnly: true}))
	t.Cleanup(srv.Close)
	ctx := testenv.Ctx(t, time.Minute)

	// layout waits until the panel's text contains want and returns it.
	layout := func(what, want string) string {
		t.Helper()
		return value(t, bctx, what, chromedp.Poll[string](`(() => {
			const p = document.querySelector("#layout");
			return p && p.textContent.includes(`+"`"+want+"`"+`) ? p.textContent : "";
		})()`))
	}
	step(t, bctx, "open the dashboard", chromedp.Navigate(srv.URL+"/ui/"))
	layout("the layout before a change", "generation 0, 2 shards, stable (never resized)")

	if _, err := in.Resize(ctx, 4); err != nil {
		t.Fatal(err)
	}
	got := layout("the change resharding", "generation 1, 4 shards, resharding 2 -> 4: 0/4 shards done, 0 tasks moved")
	if !strings.Contains(got, "at most 3 tasks left in 2 old shards") {
		t.Fatalf("layout during the change: %q", got)
	}
	bar := value(t, bctx, "read the progress bar", chromedp.Evaluate[string](`(() => {
		const b = document.querySelector("#layoutprogress");
		return b.hidden + " " + b.value + "/" + b.max + " " + document.querySelectorAll("#shards tbody tr").length;
	})()`))
	if bar != "false 0/4 4" {
		t.Fatalf("progress bar (hidden value/max rows): %q", bar)
	}

	l, err := e.Store.RefreshLayout(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Store.AddMoved(ctx, l, 1234); err != nil {
		t.Fatal(err)
	}
	for sh := range 4 {
		if _, err := e.Store.ShardDone(ctx, l, sh); err != nil {
			t.Fatal(err)
		}
	}
	got = layout("the change ended", "generation 1, 4 shards, stable; the last change ended")
	if !strings.Contains(got, "1,234 tasks moved") {
		t.Fatalf("layout after the change: %q", got)
	}
	after := value(t, bctx, "read the header and the bar", chromedp.Evaluate[string](`(() =>
		document.querySelector("#layoutprogress").hidden + " " + document.querySelector("#deployment").textContent)()`))
	if after != "true namespace uil, 4 shards" {
		t.Fatalf("after the change (bar hidden, header): %q", after)
	}
}
