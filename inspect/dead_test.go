package inspect_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// bury writes n dead letters of queue straight into their shards, as the
// scripts leave them (data, dead-letter entry and record, count), with
// last error errText: a fast fixture for large numbers.
func bury(t *testing.T, e *shardtest.Env, queue, prefix, errText string, n int) []string {
	t.Helper()
	// A minute, and a millisecond a letter: 100,000 of them (the soak
	// form) take most of a minute under the race detector beside the
	// other soak tests.
	ctx := testenv.Ctx(t, time.Minute+time.Duration(n)*time.Millisecond)
	l := e.Layout()
	out := make([]string, n)
	now := time.Now()
	pipe := e.RDB.Pipeline()
	for i := range out {
		id := fmt.Sprintf("%s%d", prefix, i)
		out[i] = id
		sh := l.ShardOf(id)
		blob := shard.Encode(shard.Task{Queue: queue, Attempts: 4, MaxRetries: 3, Timeout: time.Second, Due: now, Enqueued: now, Payload: []byte("p-" + id)})
		rec, _ := json.Marshal(map[string]any{"reason": "max retries exhausted", "error": errText, "at": now.UnixMilli()})
		pipe.HSet(ctx, l.Tasks(sh), id, blob)
		pipe.ZAdd(ctx, l.Dead(sh), redis.Z{Score: float64(now.UnixMilli()), Member: id})
		pipe.HSet(ctx, l.DeadInfo(sh), id, rec)
		pipe.HIncrBy(ctx, l.Counts(sh), "d|"+queue, 1)
		if pipe.Len() >= 4000 {
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	return out
}

// deliverAll moves every due task and pops every ready entry of the
// queues, returning how often each id was popped.
func deliverAll(t *testing.T, e *shardtest.Env, queues ...string) map[string]int {
	t.Helper()
	ctx := testenv.Ctx(t, 30*time.Second)
	e.MoveAhead(0)
	got := map[string]int{}
	for {
		_, entries, err := e.Store.Pop(ctx, e.Layout().ReadyKeys(queues), 100, time.Second)
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		if len(entries) == 0 {
			return got
		}
		for _, en := range entries {
			got[strings.Split(en, "|")[1]]++
		}
	}
}

// TestReplayByFilter: replay by error substring and queue moves exactly
// the matching dead letters, with attempts reset, and each is then
// delivered once; the others stay dead.
func TestReplayByFilter(t *testing.T) {
	t.Parallel()
	e, in := newInspector(t, 4)
	ctx := testenv.Ctx(t, 30*time.Second)
	timeouts := bury(t, e, "a", "timeout-", "partner timeout", 30)
	other := bury(t, e, "a", "refused-", "connection refused", 20)
	inB := bury(t, e, "b", "b-timeout-", "partner timeout", 10)

	page, err := in.ListDead(ctx, inspect.DeadFilter{Queue: "a", ErrorContains: "timeout"}, "", 1000)
	if err != nil || len(page.Tasks) != 30 || page.Cursor != "" {
		t.Fatalf("list: %d tasks, cursor %q, %v", len(page.Tasks), page.Cursor, err)
	}
	var calls int
	p, err := in.ReplayDead(ctx, inspect.DeadFilter{Queue: "a", ErrorContains: "timeout"}, time.Time{}, func(inspect.Progress) { calls++ })
	if err != nil {
		t.Fatal(err)
	}
	if p.Done != 30 || p.Scanned != 60 || p.ShardsDone != 4 || calls != p.Calls {
		t.Fatalf("progress %+v after %d reports, want 30 replayed of 60 examined in 4 shards", p, calls)
	}
	for _, id := range timeouts {
		tk, err := in.Task(ctx, id)
		if err != nil || tk.State != inspect.StateScheduled || tk.Attempts != 0 || tk.Dead != nil || tk.LastError != "" {
			t.Fatalf("%s after replay: %+v %v; want scheduled with 0 attempts", id, tk, err)
		}
	}
	for _, id := range append(append([]string{}, other...), inB...) {
		if tk, err := in.Dead(ctx, id); err != nil || tk.Dead.Reason != "max retries exhausted" {
			t.Fatalf("%s should still be dead: %+v %v", id, tk, err)
		}
	}
	got := deliverAll(t, e, "a", "b")
	checkOnce(t, "delivered after replay", got, timeouts)
	a, err := in.Queue(ctx, "a")
	if err != nil || a.Counts != (inspect.Counts{Ready: 0, InFlight: 30, Dead: 20}) {
		t.Fatalf("queue a after replay and pops: %+v %v", a.Counts, err)
	}
}

// TestReplayAtAndPurge: one replay scheduled later, one purge that frees
// the id for a new enqueue; both refuse ids that are not dead.
func TestReplayAtAndPurge(t *testing.T) {
	t.Parallel()
	e, in := newInspector(t, 2)
	ctx := testenv.Ctx(t, 30*time.Second)
	dead := e.Dead("a", "d-", 3)
	at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	if err := in.Replay(ctx, dead[0], at); err != nil {
		t.Fatal(err)
	}
	if tk, err := in.Task(ctx, dead[0]); err != nil || tk.State != inspect.StateScheduled || !tk.Due.Equal(at) {
		t.Fatalf("replayed at %v: %+v %v", at, tk, err)
	}
	if err := in.Purge(ctx, dead[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Task(ctx, dead[1]); !errors.Is(err, inspect.ErrNotFound) {
		t.Fatalf("purged task still found: %v", err)
	}
	if r := e.Store.Enqueue(ctx, shard.EnqueueArgs{ID: dead[1], Queue: "a", MaxRetries: -1}); r.Err != nil {
		t.Fatalf("enqueue of a purged id: %v", r.Err)
	}
	if r := e.Store.Enqueue(ctx, shard.EnqueueArgs{ID: dead[2], Queue: "a", MaxRetries: -1}); !errors.Is(r.Err, shard.ErrDuplicate) {
		t.Fatalf("enqueue of a dead id: %v, want a duplicate", r.Err)
	}
	for _, err := range []error{in.Replay(ctx, dead[0], time.Time{}), in.Purge(ctx, "nobody")} {
		if !errors.Is(err, inspect.ErrNotFound) {
			t.Fatalf("%v, want ErrNotFound", err)
		}
	}
	p, err := in.PurgeDead(ctx, inspect.DeadFilter{}, nil)
	if err != nil || p.Done != 1 {
		t.Fatalf("purge all: %+v %v", p, err)
	}
	if r := e.Store.Enqueue(ctx, shard.EnqueueArgs{ID: dead[2], Queue: "a", MaxRetries: -1}); r.Err != nil {
		t.Fatalf("enqueue after purge all: %v", r.Err)
	}
}

// slowest returns the longest command SLOWLOG recorded since reset
// (threshold 0 records every command).
func slowest(t *testing.T, rdb *redis.Client) (time.Duration, string) {
	t.Helper()
	logs, err := rdb.SlowLogGet(testenv.Ctx(t, 10*time.Second), -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var worst redis.SlowLog
	for _, l := range logs {
		if l.Duration > worst.Duration {
			worst = l
		}
	}
	name := ""
	if len(worst.Args) > 0 {
		name = worst.Args[0]
	}
	return worst.Duration, name
}

// TestBulkDeadInBoundedCalls: replay, then purge, of 20,000 dead letters
// over 16 shards (1,250 a shard, a few calls each), each in bounded
// calls; prints the slowest call SLOWLOG saw and the total time.
// TestSoakBulkDeadInBoundedCalls does the same with 100,000.
func TestBulkDeadInBoundedCalls(t *testing.T) {
	t.Parallel()
	testBulkDead(t, 20000)
}

// TestSoakBulkDeadInBoundedCalls is the long form of
// TestBulkDeadInBoundedCalls: 100,000 dead letters.
func TestSoakBulkDeadInBoundedCalls(t *testing.T) {
	testenv.SkipUnlessSoak(t)
	t.Parallel()
	testBulkDead(t, 100000)
}

func testBulkDead(t *testing.T, n int) {
	e, in := newInspector(t, 16)
	ctx := testenv.Ctx(t, 2*time.Minute+time.Duration(n)*3*time.Millisecond) // bury's bound, twice, and the calls

	for _, c := range [][]string{{"slowlog-log-slower-than", "0"}, {"slowlog-max-len", "10000"}} {
		if err := e.RDB.ConfigSet(ctx, c[0], c[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, op := range []string{"replay", "purge"} {
		bury(t, e, "a", op+"-", "boom", n)
		if err := e.RDB.SlowLogReset(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		var p inspect.Progress
		var err error
		if op == "replay" {
			p, err = in.ReplayDead(ctx, inspect.DeadFilter{}, time.Now().Add(time.Hour), nil)
		} else {
			p, err = in.PurgeDead(ctx, inspect.DeadFilter{}, nil)
		}
		took := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		worst, cmd := slowest(t, e.RDB)
		t.Logf("%s of %d dead letters: %d calls, total %s, slowest call in SLOWLOG %s (%s)", op, n, p.Calls, took.Round(time.Millisecond), worst, cmd)
		if p.Done != int64(n) || p.Calls < n/500 {
			t.Fatalf("%s: %+v, want %d done in calls of at most 500", op, p, n)
		}
		q, err := in.Queue(ctx, "a")
		if err != nil || q.Counts.Dead != 0 {
			t.Fatalf("after %s: %+v %v", op, q.Counts, err)
		}
	}
	q, _ := in.Queue(ctx, "a")
	if q.Counts.Scheduled != int64(n) {
		t.Fatalf("%d scheduled after replaying %d", q.Counts.Scheduled, n)
	}
}
