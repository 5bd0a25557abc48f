package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/dashboard"
	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// paths records the paths a server was asked for.
type paths struct {
	mu   sync.Mutex
	seen []string
}

func (p *paths) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.seen = append(p.seen, r.Method+" "+r.URL.Path)
		p.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

// take returns the paths asked for since the last take.
func (p *paths) take() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.seen
	p.seen = nil
	return out
}

// TestDashboardCannotBeFramed: a page of another origin (a second local
// server) that puts /ui/ in a full-window iframe, where one click on
// the queue's Pause button used to pause the queue, gets a blocked frame:
// Chromium asks for the page and refuses to show it (CSP frame-ancestors
// 'none', X-Frame-Options DENY), so the dashboard's document never
// commits in the frame, and a click where its Pause button would be
// changes nothing. Opened directly, the same page works, its Pause asking
// for confirmation first.
func TestDashboardCannotBeFramed(t *testing.T) {
	testenv.Parallel(t)
	bctx := browser(t)
	asked := answerDialogs(t, bctx)
	e := shardtest.New(t, shardtest.Options{Namespace: "uif", Shards: 2})
	e.Schedule(shardtest.Queue, time.Hour, "f1", "f2")
	in, err := inspect.New(e.RDB, inspect.Config{Namespace: "uif", Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	var asks paths
	dash := httptest.NewServer(asks.wrap(dashboard.New(dashboard.Options{Inspector: in})))
	t.Cleanup(dash.Close)
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><html><body style="margin:0">
<iframe id="f" src="%s/ui/" onload="window.framed = true"
  style="position:absolute;left:0;top:0;width:100vw;height:100vh;border:0"></iframe>
</body></html>`, dash.URL)
	}))
	t.Cleanup(evil.Close)
	ctx := testenv.Ctx(t, time.Minute)
	pauseSel := fmt.Sprintf(`#queues button[data-action="pause"][data-queue=%q]`, shardtest.Queue)

	// Where the Pause button is when the page fills the window.
	step(t, bctx, "open the dashboard", chromedp.Navigate(dash.URL+"/ui/"), chromedp.WaitVisible(pauseSel))
	at := value(t, bctx, "find the Pause button", chromedp.Evaluate[[]float64](`(() => {
		const r = document.querySelector('`+pauseSel+`').getBoundingClientRect();
		return [r.x + r.width / 2, r.y + r.height / 2];
	})()`))
	asks.take()

	step(t, bctx, "open the other origin's page", chromedp.Navigate(evil.URL+"/"))
	value(t, bctx, "wait for the frame to load", chromedp.Poll[bool](`window.framed === true`))
	tree := value(t, bctx, "read the frame tree", chromedp.Action[*page.FrameTree](func(ctx context.Context, tg *chromedp.Target) (*page.FrameTree, error) {
		r, err := cdp.Call(ctx, tg, page.GetFrameTree, cdp.Empty{})
		return r.FrameTree, err
	}))
	if len(tree.ChildFrames) != 1 {
		t.Fatalf("the page has %d frames, want 1", len(tree.ChildFrames))
	}
	if f := tree.ChildFrames[0].Frame; strings.HasPrefix(f.URL, dash.URL) {
		t.Fatalf("the dashboard loaded in another origin's frame (frame URL %s)", f.URL)
	}
	got := asks.take()
	if len(got) == 0 || got[0] != "GET /ui/" {
		t.Fatalf("the frame did not ask for the page: %q", got)
	}
	for _, p := range got {
		if p != "GET /ui/" {
			t.Fatalf("the blocked frame loaded %s (asked for %q)", p, got)
		}
	}
	step(t, bctx, "click where the Pause button would be", chromedp.MouseClickXY(at[0], at[1]))
	if got := asked.last(); got != "" {
		t.Fatalf("a dialog opened: %q", got)
	}

	// Back on the dashboard itself: the queue is still active (the
	// click reached nothing), and its own Pause works once confirmed.
	step(t, bctx, "open the dashboard again", chromedp.Navigate(dash.URL+"/ui/"), chromedp.WaitVisible(pauseSel))
	if q, err := in.Queue(ctx, shardtest.Queue); err != nil || q.State != inspect.QueueActive {
		t.Fatalf("after the click on the other origin's page: %+v %v", q, err)
	}
	if got := confirmClick(t, bctx, asked, "click Pause", pauseSel); !strings.HasPrefix(got, "Pause queue "+shardtest.Queue+"?") {
		t.Fatalf("Pause asked %q", got)
	}
	step(t, bctx, "see Resume", chromedp.WaitVisible(fmt.Sprintf(`#queues button[data-action="resume"][data-queue=%q]`, shardtest.Queue)))
	if q, err := in.Queue(ctx, shardtest.Queue); err != nil || q.State != inspect.QueuePaused {
		t.Fatalf("after Pause: %+v %v", q, err)
	}
}
