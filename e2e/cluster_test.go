package e2e_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestSchedulersOnRedisCluster: two scheduler binaries in redis.mode
// cluster, on three primaries, divide the 16 shards, register the queues
// in every shard (whichever node holds its slot), and move due tasks into
// the ready lists of every shard promptly: a task enqueued due now wakes
// its sleeping owner through the shard's sharded channel on the node that
// owns the slot (the safety re-check is an hour here, so only wake-ups
// can move them in time). Workers cannot consume on a cluster yet; the
// tasks are counted in the ready lists.
func TestSchedulersOnRedisCluster(t *testing.T) {
	t.Parallel()
	c := newCluster(t, withRedisCluster())
	args := []string{"-set", "scheduler.safety_recheck=1h", "-set", "scheduler.idle_recheck=1h"}
	c.start("cl-1", args...)
	c.start("cl-2", args...)
	testenv.WaitFor(t, 30*time.Second, "two replicas own 8 shards each", func() (bool, string) { return c.settled("cl-1", "cl-2") })
	in, err := inspect.New(inspect.Options{Redis: c.rdb, Shards: nShards})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Ctx(t, time.Minute)
	// Wait until every owner sleeps on an empty shard: the tasks below
	// then reach the ready lists only through wake-ups.
	testenv.WaitFor(t, 10*time.Second, "queue default registered in every shard", func() (bool, string) {
		q, err := in.Queue(ctx, "default")
		return err == nil && len(q.Shards) == nShards, fmt.Sprint(err)
	})
	const n = 400
	tasks := make([]client.Task, n)
	for i := range tasks {
		tasks[i] = client.Task{ID: fmt.Sprintf("cl-%d", i), Queue: "default", Delay: time.Duration(i%5) * 100 * time.Millisecond}
	}
	sent := time.Now()
	if _, err := c.cli.EnqueueBatch(ctx, tasks); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 15*time.Second, "every task moved to its shard's ready list", func() (bool, string) {
		q, err := in.Queue(ctx, "default")
		if err != nil {
			return false, err.Error()
		}
		for sh, counts := range q.Shards {
			if counts.Scheduled != 0 {
				return false, fmt.Sprintf("shard %d: %+v", sh, counts)
			}
		}
		return q.Counts.Ready == n, fmt.Sprintf("%+v", q.Counts)
	})
	perNode := map[string]int{}
	for sh := range nShards {
		perNode[c.redisCluster.PrimaryFor(c.store.Layout().Delayed(sh)).Addr]++
	}
	t.Logf("%d tasks due within 400 ms over %d shards on %d primaries %v: all in ready lists %s after the enqueue",
		n, nShards, len(perNode), perNode, time.Since(sent).Round(time.Millisecond))
}
