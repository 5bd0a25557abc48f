package dashboard

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestShardsReportTheLayout: GET shards carries the layout record with
// the shards it lists, and follows a change of the shard count made by
// another process (2 -> 4 here): resharding over the 4 shards with its
// progress, then stable once every shard is recorded done; GET config
// reports the new count. The page has the layout's place in the Shards
// panel.
func TestShardsReportTheLayout(t *testing.T) {
	t.Parallel()
	e := shardtest.New(t, shardtest.Options{Namespace: "ui", Shards: 2})
	e.Schedule(shardtest.Queue, time.Hour, "s1", "s2", "s3")
	in, err := inspect.New(e.RDB, inspect.Config{Namespace: "ui", Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(Options{Inspector: in, ReadOnly: true}))
	t.Cleanup(srv.Close)
	ctx := testenv.Ctx(t, 30*time.Second)
	get := func() (inspect.LayoutStatus, []inspect.Shard) {
		t.Helper()
		code, body := do(t, "GET", srv.URL+"/ui/api/shards", nil)
		var got struct {
			Layout *inspect.LayoutStatus
			Shards []inspect.Shard
		}
		if err := json.Unmarshal([]byte(body), &got); code != 200 || err != nil || got.Layout == nil {
			t.Fatalf("shards: %d %s", code, body)
		}
		return *got.Layout, got.Shards
	}
	if l, ss := get(); l.State != inspect.LayoutNone || l.Generation != 0 || l.Shards != 2 || l.Span != 2 || len(ss) != 2 {
		t.Fatalf("before a change: %+v, %d shards", l, len(ss))
	}

	// Another process (the CLI) starts the change: the dashboard's
	// Inspector follows the record.
	other, err := inspect.New(e.RDB, inspect.Config{Namespace: "ui", Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Resize(ctx, 4); err != nil {
		t.Fatal(err)
	}
	l, ss := get()
	if l.State != inspect.LayoutResharding || l.Generation != 1 || l.From != 2 || l.Shards != 4 || l.Span != 4 ||
		len(l.Done) != 0 || len(l.Pending) != 2 || l.Pending[0].Tasks+l.Pending[1].Tasks != 3 || len(ss) != 4 {
		t.Fatalf("during the change: %+v, %d shards", l, len(ss))
	}
	sl, err := e.Store.RefreshLayout(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Store.AddMoved(ctx, sl, 2); err != nil {
		t.Fatal(err)
	}
	for sh := range 3 {
		if _, err := e.Store.ShardDone(ctx, sl, sh); err != nil {
			t.Fatal(err)
		}
	}
	if l, _ := get(); l.State != inspect.LayoutResharding || len(l.Done) != 3 || l.Moved != 2 || len(l.Pending) != 0 {
		t.Fatalf("3 of 4 shards done: %+v", l)
	}
	if ended, err := e.Store.ShardDone(ctx, sl, 3); err != nil || !ended {
		t.Fatalf("the last shard done: %v %v", ended, err)
	}
	if l, ss := get(); l.State != inspect.LayoutStable || l.Shards != 4 || l.From != 0 || l.Moved != 2 || l.Finished.IsZero() || len(ss) != 4 {
		t.Fatalf("after the change: %+v, %d shards", l, len(ss))
	}
	if code, body := do(t, "GET", srv.URL+"/ui/api/config", nil); code != 200 || !strings.Contains(body, `"shards":4`) {
		t.Fatalf("config after the change: %d %s", code, body)
	}
	if code, body := do(t, "GET", srv.URL+"/ui/", nil); code != 200 || !strings.Contains(body, `id="layout"`) {
		t.Fatalf("page: %d %.100s", code, body)
	}
}

// TestShardsNameWhatAChangeWaitsFor (issue 24, item 8): during a change,
// GET shards names, per old shard not done, the queues whose tasks in
// flight keep it open, paused or not, with their ready count (the page
// lists them under the layout line).
func TestShardsNameWhatAChangeWaitsFor(t *testing.T) {
	t.Parallel()
	e := shardtest.New(t, shardtest.Options{Namespace: "ui", Shards: 2})
	e.Ready(shardtest.Queue, e.IDsIn(1, 3, "r")...)
	ctx := testenv.Ctx(t, 30*time.Second)
	if _, err := e.Store.SetPaused(ctx, shardtest.Queue, true); err != nil {
		t.Fatal(err)
	}
	in, err := inspect.New(e.RDB, inspect.Config{Namespace: "ui", Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.Resize(ctx, 4); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(Options{Inspector: in, ReadOnly: true}))
	t.Cleanup(srv.Close)
	code, body := do(t, "GET", srv.URL+"/ui/api/shards", nil)
	var got struct{ Layout inspect.LayoutStatus }
	if err := json.Unmarshal([]byte(body), &got); code != 200 || err != nil || len(got.Layout.Pending) != 2 {
		t.Fatalf("shards: %d %s", code, body)
	}
	w := got.Layout.Pending[1].Waiting
	if len(w) != 1 || w[0].Queue != shardtest.Queue || !w[0].Paused || w[0].Ready != 3 || w[0].OldestReady.IsZero() {
		t.Fatalf("shard 1 waits for %+v, want the paused queue's 3 ready tasks", w)
	}
	if code, body := do(t, "GET", srv.URL+"/ui/app.js", nil); code != 200 || !strings.Contains(body, "waits for queue") {
		t.Fatalf("app.js: %d", code)
	}
}
