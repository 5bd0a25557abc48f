package worker

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestWorkerOnRedisCluster: on a Redis Cluster of three primaries, a
// worker delivers every task of 16 shards spread over the nodes exactly
// once, for a plain queue and a queue under cluster-wide flow control;
// an idle worker is woken by the ready announcements, not by its fetch
// timeout (30 s, longer than the test waits); and its connections grow
// with nodes, not shards: one pub/sub connection per node, and no
// connection blocked in a pop.
func TestWorkerOnRedisCluster(t *testing.T) {
	t.Parallel()
	e := newClusterEnv(t, shardtest.ClusterOptions{}, "q", "flow")
	rc, ctx := e.Redis, testenv.Ctx(t, 2*time.Minute)
	spread := e.Spread() // all three primaries (NewCluster checks)
	t.Logf("16 shards over the primaries: %v", spread)

	wcc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs(), ClientName: "hg-worker"})
	defer wcc.Close()
	w, err := New(wcc, Config{Namespace: ns, Shards: clusterShards, FetchTimeout: 30 * time.Second, ShutdownGrace: time.Second, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Handle("q", e.handle, QueueOptions{Concurrency: 8}); err != nil {
		t.Fatal(err)
	}
	if err := w.Handle("flow", e.handle, QueueOptions{Concurrency: 2, MaxConcurrency: 3}); err != nil {
		t.Fatal(err)
	}
	ready := func(queue, prefix string, n int) []string {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("%s%d", prefix, i)
		}
		e.Ready(queue, ids...)
		return ids
	}

	before := append(ready("q", "early-", 300), ready("flow", "early-flow-", 30)...)
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(runCtx) }()
	defer func() { cancel(); <-done }()
	testenv.WaitFor(t, 20*time.Second, "the tasks ready at start delivered", e.delivered(before))

	// Idle now: every pop waits for an announcement. Tasks made ready
	// now are delivered long before the 30 s fetch timeout ends a wait.
	testenv.WaitFor(t, 10*time.Second, "the worker subscribed on every node", func() (bool, string) {
		n := w.popper.(*clusterPopper).hub.Conns()
		return n == len(spread), fmt.Sprintf("%d pub/sub connections", n)
	})
	for round := range 3 {
		start := time.Now()
		later := append(ready("q", fmt.Sprintf("late%d-", round), 50), ready("flow", fmt.Sprintf("late%d-flow-", round), 5)...)
		testenv.WaitFor(t, 20*time.Second, fmt.Sprintf("round %d delivered after the announcements", round), e.delivered(later))
		t.Logf("round %d: 55 tasks made ready on an idle worker delivered within %v", round, time.Since(start).Round(time.Millisecond))
	}
	e.mu.Lock()
	for id, n := range e.runs {
		if n != 1 {
			t.Errorf("%s ran %d times", id, n)
		}
	}
	e.mu.Unlock()

	// Connections of the worker's client per node: pooled connections
	// for short script calls, plus one pub/sub connection; none blocked.
	for _, n := range rc.Primaries() {
		list, err := n.Client(t).ClientList(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		conns, blocked := 0, 0
		for _, line := range strings.Split(list, "\n") {
			if !strings.Contains(line, "name=hg-worker") {
				continue
			}
			conns++
			if strings.Contains(line, "cmd=blmpop") || strings.Contains(line, "flags=b") {
				blocked++
			}
		}
		t.Logf("node %s (%d shards): %d connections of the worker", n.Addr, spread[n.Addr], conns)
		if blocked > 0 {
			t.Errorf("node %s: %d of the worker's connections are blocked", n.Addr, blocked)
		}
	}
}

// TestWorkerFollowsAClusterFailover: a primary of a cluster is SIGKILLed
// and its replica promoted; the running worker carries on by itself:
// tasks made ready afterwards in every shard, the dead node's included,
// are delivered well within the fetch timeout (30 s), so its pops reach
// the promoted node and the ready announcements were subscribed there.
func TestWorkerFollowsAClusterFailover(t *testing.T) {
	t.Parallel()
	e := newClusterEnv(t, shardtest.ClusterOptions{Replicas: 1, Client: redis.ClusterOptions{ClusterStateReloadInterval: 2 * time.Second}}, "q")
	l := e.Layout()
	w, err := New(e.RDB, Config{Namespace: ns, Shards: clusterShards, FetchTimeout: 30 * time.Second, ShutdownGrace: time.Second, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Handle("q", e.handle, QueueOptions{Concurrency: 8}); err != nil {
		t.Fatal(err)
	}
	// ready makes one task ready in every shard.
	ready := func(prefix string) []string {
		var ids []string
		for sh := range clusterShards {
			ids = append(ids, testenv.IDs(prefix, 1, func(id string) bool { return l.ShardOf(id) == sh })[0])
		}
		e.Ready("q", ids...)
		return ids
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(runCtx) }()
	defer func() { cancel(); <-done }()
	testenv.WaitFor(t, 20*time.Second, "a task of every shard delivered", e.delivered(ready("before-")))

	victim := e.Redis.PrimaryFor(l.Tag(0))
	victim.Kill()
	killed := time.Now()
	defer victim.Restart() // it rejoins as a replica; go-redis's re-dialling goroutine then ends
	after := ready("after-")
	testenv.WaitFor(t, 25*time.Second, "a task of every shard made ready after the kill delivered", e.delivered(after))
	t.Logf("primary of shard 0 SIGKILLed: every shard's task made ready after the kill delivered %v after it", time.Since(killed).Round(time.Millisecond))
}

// clusterShards is the shard count of the cluster tests.
const clusterShards = 16

// clusterEnv is a cluster tests' deployment (shardtest.Cluster: 16
// shards with queues registered) and the deliveries its handler recorded.
type clusterEnv struct {
	*shardtest.Cluster

	mu   sync.Mutex
	runs map[string]int // deliveries by task id
}

// newClusterEnv starts a cluster of o in namespace ns with clusterShards
// shards, and registers queues.
func newClusterEnv(t *testing.T, o shardtest.ClusterOptions, queues ...string) *clusterEnv {
	t.Helper()
	o.Namespace, o.Shards, o.Queues = ns, clusterShards, map[string]shard.QueuePolicy{}
	for _, q := range queues {
		o.Queues[q] = shardtest.Policy()
	}
	return &clusterEnv{Cluster: shardtest.NewCluster(t, o), runs: map[string]int{}}
}

// handle records a delivery.
func (e *clusterEnv) handle(_ context.Context, task *Task) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.runs[task.ID]++
	return nil
}

// delivered is a condition: every one of ids ran.
func (e *clusterEnv) delivered(ids []string) func() (bool, string) {
	return func() (bool, string) {
		e.mu.Lock()
		defer e.mu.Unlock()
		var missing []string
		for _, id := range ids {
			if e.runs[id] == 0 {
				missing = append(missing, id)
			}
		}
		return len(missing) == 0, fmt.Sprintf("%d of %d not delivered, e.g. %.3v", len(missing), len(ids), missing)
	}
}

// TestHintFirst: the node of the list last announced is popped first,
// that list first among its keys, the others in their order.
func TestHintFirst(t *testing.T) {
	t.Parallel()
	groups := []nodeKeys{{"a", []string{"a1", "a2"}}, {"b", []string{"b1", "b2", "b3"}}, {"c", []string{"c1"}}}
	hintFirst(groups, "b3")
	var got []string
	for _, g := range groups {
		got = append(got, g.node+":"+strings.Join(g.keys, ","))
	}
	if want := []string{"b:b3,b1,b2", "a:a1,a2", "c:c1"}; !slices.Equal(got, want) {
		t.Fatalf("after hinting b3: %v, want %v", got, want)
	}
	hintFirst(groups, "nowhere")
	if groups[0].node != "b" || groups[0].keys[0] != "b3" {
		t.Fatalf("an unknown hint reordered: %v", groups)
	}
}
