package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestStatsHistory: stats QUEUE shows the queue's history in rows of
// --step with a total, as a table and as JSON; stats without a queue is
// the totals as before; bad flags are usage errors.
func TestStatsHistory(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t, "qh")
	ctx := testenv.Ctx(t, 10*time.Second)
	now := time.Now()
	var m shard.Minute
	m.Counts[shard.HistEnqueued], m.Counts[shard.HistStarted], m.Counts[shard.HistSucceeded] = 7, 5, 4
	m.Late[shard.LateBucket(3*time.Millisecond)] = 5
	m.Depth, m.Oldest = 12, 40
	ms := []shard.QueueMinute{{Queue: "q", At: now.Add(-3 * time.Minute), Minute: m}, {Queue: "q", At: now.Add(-2 * time.Minute), Minute: m}}
	if err := e.store.AddQueueHistory(ctx, ms); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := e.cli("-o", "json", "stats", "q", "--since", "10m", "--step", "1m")
	var got struct {
		Queue   string
		Step    string
		History []inspect.QueueStats
	}
	if err := json.Unmarshal([]byte(out), &got); code != exitOK || err != nil {
		t.Fatalf("stats -o json: exit %d, %v, stdout %q, stderr %q", code, err, out, errOut)
	}
	var enq, started uint64
	for _, s := range got.History {
		enq += s.Enqueued
		started += s.Started
		if s.Started > 0 && (s.LatenessP50 <= 2*time.Millisecond || s.LatenessP50 > 5*time.Millisecond || s.Ready != 12 || s.OldestReady != 40*time.Second) {
			t.Errorf("row %+v", s)
		}
	}
	if got.Queue != "q" || got.Step != "1m0s" || len(got.History) < 10 || enq != 14 || started != 10 {
		t.Fatalf("history %+v (enqueued %d, started %d)", got, enq, started)
	}
	out, _, code = e.cli("stats", "q", "--since", "10m")
	if code != exitOK || !strings.Contains(out, "LATE P99") || !strings.Contains(out, "total") || !strings.Contains(out, "14") {
		t.Fatalf("stats table: exit %d, %q", code, out)
	}
	for _, args := range [][]string{{"stats", "q", "--since", "30s"}, {"stats", "q", "--step", "90s"}, {"stats", "q", "r"}, {"stats", "bad queue!"}} {
		if _, _, code := e.cli(args...); code != exitUsage {
			t.Errorf("%v: exit %d, want usage", args, code)
		}
	}
	if out, _, code := e.cli("stats"); code != exitOK || !strings.Contains(out, "scheduled") {
		t.Fatalf("stats without a queue: exit %d, %q", code, out)
	}
}
