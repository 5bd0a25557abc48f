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

// TestReadsShowTheRestWhenAShardIsCorrupt: a ready list of the wrong type
// in shard 1 made GET queues and GET shards answer 500. They now answer
// the readable shards with a warning naming shard 1, and the shards
// table marks it.
func TestReadsShowTheRestWhenAShardIsCorrupt(t *testing.T) {
	t.Parallel()
	e := shardtest.New(t, shardtest.Options{Namespace: "ui", Shards: 2})
	e.Schedule(shardtest.Queue, time.Hour, e.IDsIn(0, 2, "s")...)
	ctx := testenv.Ctx(t, 10*time.Second)
	if err := e.RDB.Set(ctx, e.Layout().Ready(1, shardtest.Queue), "garbage", 0).Err(); err != nil {
		t.Fatal(err)
	}
	in, err := inspect.New(e.RDB, inspect.Config{Namespace: "ui", Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(Options{Inspector: in, ReadOnly: true}))
	t.Cleanup(srv.Close)
	code, body := do(t, "GET", srv.URL+"/ui/api/queues", nil)
	var qs struct {
		Queues  []inspect.Queue
		Total   inspect.Counts
		Warning string
	}
	if err := json.Unmarshal([]byte(body), &qs); code != 200 || err != nil || qs.Total.Scheduled != 2 || !strings.Contains(qs.Warning, "shard 1") {
		t.Fatalf("queues: %d %s", code, body)
	}
	code, body = do(t, "GET", srv.URL+"/ui/api/shards", nil)
	var sh struct {
		Shards  []inspect.Shard
		Warning string
	}
	if err := json.Unmarshal([]byte(body), &sh); code != 200 || err != nil || len(sh.Shards) != 2 ||
		sh.Shards[0].Counts.Scheduled != 2 || sh.Shards[1].Problem == "" || !strings.Contains(sh.Warning, "shard 1") {
		t.Fatalf("shards: %d %s", code, body)
	}
}
