package e2e_test

import (
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/keyslot"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestSchedulersOnRedisCluster: two scheduler binaries in redis.mode
// cluster, on three primaries, divide the 16 shards, register the queues
// in every shard (whichever node holds its slot), and move due tasks into
// the ready lists of every shard promptly: a task enqueued due now wakes
// its sleeping owner through the shard's sharded channel on the node that
// owns the slot (the safety re-check is an hour here, so only wake-ups
// can move them in time). No worker runs here: the tasks are counted in
// the ready lists (TestClusterFlowAndLiveReshard runs workers).
func TestSchedulersOnRedisCluster(t *testing.T) {
	testenv.Parallel(t)
	c := newCluster(t, withRedisCluster())
	args := []string{"-set", "scheduler.safety_recheck=1h", "-set", "scheduler.idle_recheck=1h"}
	c.start("cl-1", args...)
	c.start("cl-2", args...)
	testenv.WaitFor(t, 30*time.Second, "two replicas own 8 shards each", func() (bool, string) { return c.settled("cl-1", "cl-2") })
	in, err := inspect.New(c.rdb, inspect.Config{Shards: nShards})
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

// TestClusterFlowAndLiveReshard: on three primaries, two scheduler and
// two worker binaries deliver each task exactly once from the shards of
// every node; then, under load, "redis-cli --cluster reshard" moves the
// slots of two shards to another primary while tasks are enqueued,
// moved, popped and acked in them: every acknowledged task is delivered,
// none early, and the worker and the schedulers follow the move by
// themselves (MOVED/ASK, the slot map reload, their ready announcements
// re-subscribed on the new node).
func TestClusterFlowAndLiveReshard(t *testing.T) {
	testenv.Parallel(t)
	c := newCluster(t, withRedisCluster())
	tg := newTarget(t)
	args := append(workerArgs(tg.URL, 5*time.Second, 16), "-set", "scheduler.strand_check=500ms")
	c.start("cr-1", args...)
	c.start("cr-2", args...)
	testenv.WaitFor(t, 30*time.Second, "two replicas own 8 shards each", func() (bool, string) { return c.settled("cr-1", "cr-2") })
	c.startWorker("cr-w1", args...)
	c.startWorker("cr-w2", args...)
	ctx := testenv.Ctx(t, 3*time.Minute)
	l := c.store.Layout()
	spread := map[string][]int{}
	for sh := range nShards {
		a := c.redisCluster.PrimaryFor(l.Tag(sh)).Addr
		spread[a] = append(spread[a], sh)
	}
	t.Logf("shards per primary: %v", spread)

	c.flow(t, ctx, tg, 400)

	// The reshards, four rounds under load: redis-cli moves, from the
	// primary with the most shards to the one with the fewest, its lowest
	// slots up to and including its second-lowest shard slot (it moves a
	// node's slots in ascending order); then the harness migrates the two
	// shard slots back, key batch by key batch as redis-cli does.
	var from, to string
	for a, shs := range spread {
		if from == "" || len(shs) > len(spread[from]) {
			from = a
		}
		if to == "" || len(shs) < len(spread[to]) {
			to = a
		}
	}
	var slots []int
	for _, sh := range spread[from] {
		slots = append(slots, keyslot.Of(l.Tag(sh)))
	}
	slices.Sort(slots)
	moved := slots[:2]
	src, dst := c.redisCluster.Node(from), c.redisCluster.Node(to)
	p := startProducer(t, c.cli, "rs-", 5*time.Millisecond, 2*time.Second)
	loadStart := time.Now()
	<-time.After(time.Second) // timed phase: load before the reshard
	var took []time.Duration
	for round := range 4 {
		began := time.Now()
		want := to
		if round%2 == 0 {
			count := slices.Index(c.redisCluster.SlotsOf(src), moved[1]) + 1
			cmd := exec.CommandContext(ctx, "redis-cli", "--cluster", "reshard", from,
				"--cluster-from", src.ID, "--cluster-to", dst.ID,
				"--cluster-slots", strconv.Itoa(count), "--cluster-yes")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("redis-cli --cluster reshard: %v\n%s", err, out)
			}
		} else {
			want = from
			for _, sl := range moved {
				if err := c.redisCluster.MigrateSlot(ctx, sl, src); err != nil {
					t.Fatal(err)
				}
			}
		}
		took = append(took, time.Since(began))
		for _, sl := range moved {
			if got := c.redisCluster.NodeForSlot(sl).Addr; got != want {
				t.Fatalf("round %d: slot %d is on %s, want %s", round, sl, got, want)
			}
		}
		<-time.After(500 * time.Millisecond) // timed phase: load between moves
	}
	<-time.After(2 * time.Second) // timed phase: load after the reshard
	p.Stop()
	p.settle(t, ctx)
	testenv.WaitFor(t, 60*time.Second, "every acknowledged task delivered", func() (bool, string) {
		m := p.missing(tg)
		return len(m) == 0, fmt.Sprintf("%d missing, e.g. %.5v", len(m), m)
	})
	if early, worst := p.early(tg); early > 0 {
		t.Errorf("%d tasks delivered early, the worst by %v", early, worst)
	}
	// A slot migration is neither a lease expiry nor a failover: no task
	// may run twice (BRIEF §4).
	if dups := p.duplicates(tg); dups > 0 {
		t.Errorf("%d tasks delivered twice while slots moved", dups)
	}
	t.Logf("2 shards moved between %s and %s 4 times under 200 tasks/s (redis-cli, back, redis-cli, back: %v); %d tasks acknowledged over %v, all delivered once",
		from, to, took, p.count(), time.Since(loadStart).Round(time.Millisecond))
}
