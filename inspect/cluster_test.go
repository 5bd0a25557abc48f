package inspect_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/keyslot"
	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestInspectorOnRedisCluster: the administration API's per-shard scripts
// run on a Redis Cluster (16 shards over 3 primaries): queue depths,
// paging over every shard, set, pause and resume, lookup and cancel.
func TestInspectorOnRedisCluster(t *testing.T) {
	t.Parallel()
	rc := shardtest.NewCluster(t, shardtest.ClusterOptions{Options: shardtest.Options{NoQueues: true}}) // the inspector sets the queue
	cc := rc.RDB
	ctx := testenv.Ctx(t, 30*time.Second)
	in, err := inspect.New(cc, inspect.Config{Shards: 16})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.SetQueue(ctx, "emails", inspect.DefaultPolicy()); err != nil {
		t.Fatalf("set a queue on a cluster: %v", err)
	}
	cli, err := client.New(cc, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	tasks := make([]client.Task, n)
	for i := range tasks {
		tasks[i] = client.Task{ID: fmt.Sprintf("t%d", i), Queue: "emails", Delay: time.Hour}
	}
	if _, err := cli.EnqueueBatch(ctx, tasks); err != nil {
		t.Fatal(err)
	}
	q, err := in.Queue(ctx, "emails")
	if err != nil || q.Counts.Scheduled != n || len(q.Shards) != 16 {
		t.Fatalf("queue on a cluster: %+v %v", q, err)
	}
	// The namespaces in use: found on the primary that holds shard 0's
	// registry, the search visiting every primary.
	if names, complete, err := in.Namespaces(ctx); err != nil || !complete || !slices.Equal(names, []string{"hourglass"}) {
		t.Fatalf("namespaces on a cluster: %v complete %v, %v", names, complete, err)
	}
	// Each shard shows the primary that serves its slot: the spread.
	shards, err := in.Shards(ctx)
	if err != nil {
		t.Fatal(err)
	}
	spread := map[string]int{}
	for _, s := range shards {
		want := rc.Redis.PrimaryFor(fmt.Sprintf("{hourglass:%d}", s.Shard))
		if s.Node != want.Addr || s.Slot != keyslot.Of(fmt.Sprintf("{hourglass:%d}", s.Shard)) {
			t.Fatalf("shard %d: node %q slot %d, want %s", s.Shard, s.Node, s.Slot, want.Addr)
		}
		spread[s.Node]++
	}
	if want := rc.Spread(); !maps.Equal(spread, want) {
		t.Fatalf("16 shards on the primaries %v, want %v", spread, want)
	}
	seen := map[string]int{}
	for cur, calls := "", 0; ; calls++ {
		page, err := in.ListTasks(ctx, inspect.ListOptions{Queue: "emails", State: inspect.StateScheduled, Cursor: cur, Limit: 50})
		if err != nil || calls > 100 {
			t.Fatalf("page %d: %v", calls, err)
		}
		for _, tk := range page.Tasks {
			seen[tk.ID]++
		}
		if cur = page.Cursor; cur == "" {
			break
		}
	}
	if len(seen) != n {
		t.Fatalf("paging listed %d distinct tasks of %d", len(seen), n)
	}
	for id, k := range seen {
		if k != 1 {
			t.Fatalf("%s listed %d times", id, k)
		}
	}
	if err := in.Pause(ctx, "emails"); err != nil {
		t.Fatal(err)
	}
	if q, err := in.Queue(ctx, "emails"); err != nil || q.State != inspect.QueuePaused {
		t.Fatalf("after pause: %+v %v", q.State, err)
	}
	if err := in.Resume(ctx, "emails"); err != nil {
		t.Fatal(err)
	}
	if tk, err := in.Task(ctx, "t7"); err != nil || tk.State != inspect.StateScheduled {
		t.Fatalf("lookup: %+v %v", tk, err)
	}
	if st, err := in.Cancel(ctx, "t7"); err != nil || st != inspect.StateScheduled {
		t.Fatalf("cancel: %v %v", st, err)
	}
	if q, err := in.Queue(ctx, "emails"); err != nil || q.Counts.Scheduled != n-1 || q.State != inspect.QueueActive {
		t.Fatalf("after cancel and resume: %+v %v", q, err)
	}
}
