package dashboard

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestBigPayloadsStayOutOfListings: with 50 dead letters of 1 MiB each,
// GET dead (a page of 50, refetched every 3 s by the page) answers each
// with inspect.PreviewBytes of its payload and its whole size, tens of
// KB in all instead of 70 MB; GET task (the task view, on demand)
// answers one payload cut to TaskPayloadCap, with its whole size.
func TestBigPayloadsStayOutOfListings(t *testing.T) {
	t.Parallel()
	e := shardtest.New(t, shardtest.Options{Namespace: "big", Shards: 2})
	in, err := inspect.New(e.RDB, inspect.Config{Namespace: "big", Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(Options{Inspector: in}))
	t.Cleanup(srv.Close)
	ctx := testenv.Ctx(t, time.Minute)
	const n, size = 50, 1 << 20
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	l := e.Layout()
	now := time.Now()
	for i := range n {
		id := fmt.Sprintf("big%d", i)
		sh := l.ShardOf(id)
		blob := shard.Encode(shard.Task{Queue: shardtest.Queue, Attempts: 4, MaxRetries: 3, Timeout: time.Second, Due: now, Enqueued: now, Payload: payload})
		rec, _ := json.Marshal(map[string]any{"reason": "max retries exhausted", "error": "boom", "at": now.UnixMilli()})
		pipe := e.RDB.Pipeline()
		pipe.HSet(ctx, l.Tasks(sh), id, blob)
		pipe.ZAdd(ctx, l.Dead(sh), redis.Z{Score: float64(now.UnixMilli()), Member: id})
		pipe.HSet(ctx, l.DeadInfo(sh), id, rec)
		pipe.HIncrBy(ctx, l.Counts(sh), "d|"+shardtest.Queue, 1)
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}

	code, body := do(t, "GET", srv.URL+"/ui/api/dead", nil)
	var page inspect.Page
	if err := json.Unmarshal([]byte(body), &page); code != 200 || err != nil || len(page.Tasks) != n {
		t.Fatalf("dead: %d, %d tasks, %v", code, len(page.Tasks), err)
	}
	if len(body) > 64<<10 {
		t.Errorf("a page of %d dead letters is %d bytes", n, len(body))
	}
	for _, tk := range page.Tasks {
		if len(tk.Payload) != inspect.PreviewBytes || tk.PayloadSize != size || string(tk.Payload) != string(payload[:inspect.PreviewBytes]) {
			t.Fatalf("%s listed with %d payload bytes of %d", tk.ID, len(tk.Payload), tk.PayloadSize)
		}
	}

	code, body = do(t, "GET", srv.URL+"/ui/api/task?id=big7", nil)
	var tk inspect.Task
	if err := json.Unmarshal([]byte(body), &tk); code != 200 || err != nil {
		t.Fatalf("task: %d %v", code, err)
	}
	if len(tk.Payload) != TaskPayloadCap || tk.PayloadSize != size || string(tk.Payload) != string(payload[:TaskPayloadCap]) || len(body) > 2*TaskPayloadCap {
		t.Fatalf("task view: %d payload bytes of %d, body %d bytes", len(tk.Payload), tk.PayloadSize, len(body))
	}
}
