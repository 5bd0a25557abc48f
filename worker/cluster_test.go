package worker

import (
	"context"
	"errors"
	"fmt"
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
	rc := testenv.StartRedisCluster(t, 3, 0)
	cc := rc.Client(t)
	const clusterShards = 16
	l, err := shard.NewLayout(ns, clusterShards)
	if err != nil {
		t.Fatal(err)
	}
	store := shard.NewStore(cc, l)
	ctx := testenv.Ctx(t, 2*time.Minute)
	policy := shardtest.Policy()
	policy.MaxPayload = 1024
	if err := store.RegisterQueues(ctx, map[string]shard.QueuePolicy{"q": policy, "flow": policy}); err != nil {
		t.Fatal(err)
	}
	spread := map[string]int{}
	for sh := range clusterShards {
		spread[rc.PrimaryFor(l.Tag(sh)).Addr]++
	}
	t.Logf("16 shards over the primaries: %v", spread)
	if len(spread) != 3 {
		t.Fatalf("the shards are on %d primaries, want all 3", len(spread))
	}

	wcc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs(), ClientName: "hg-worker"})
	defer wcc.Close()
	w, err := New(wcc, Config{Namespace: ns, Shards: clusterShards, FetchTimeout: 30 * time.Second, ShutdownGrace: time.Second, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	runs := map[string]int{}
	h := func(_ context.Context, task *Task) error {
		mu.Lock()
		defer mu.Unlock()
		runs[task.ID]++
		return nil
	}
	if err := w.Handle("q", h, QueueOptions{Concurrency: 8}); err != nil {
		t.Fatal(err)
	}
	if err := w.Handle("flow", h, QueueOptions{Concurrency: 2, MaxConcurrency: 3}); err != nil {
		t.Fatal(err)
	}

	// ready enqueues n tasks of queue due now and moves them, as a
	// scheduler does, into the ready lists of their shards.
	ready := func(queue, prefix string, n int) []string {
		args := make([]shard.EnqueueArgs, n)
		ids := make([]string, n)
		for i := range args {
			ids[i] = fmt.Sprintf("%s%d", prefix, i)
			args[i] = shard.EnqueueArgs{ID: ids[i], Queue: queue, MaxRetries: -1, Payload: []byte("p")}
		}
		for i, r := range store.EnqueueBatch(ctx, args) {
			if r.Err != nil {
				t.Fatalf("enqueue %s: %v", ids[i], r.Err)
			}
		}
		for sh := range clusterShards {
			if _, err := store.MoveAhead(ctx, sh, shardtest.Epoch, 1000, 0); err != nil {
				t.Fatalf("move shard %d: %v", sh, err)
			}
		}
		return ids
	}
	delivered := func(ids []string) func() (bool, string) {
		return func() (bool, string) {
			mu.Lock()
			defer mu.Unlock()
			missing := 0
			for _, id := range ids {
				if runs[id] == 0 {
					missing++
				}
			}
			return missing == 0, fmt.Sprintf("%d of %d not delivered", missing, len(ids))
		}
	}

	before := append(ready("q", "early-", 300), ready("flow", "early-flow-", 30)...)
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(runCtx) }()
	defer func() { cancel(); <-done }()
	testenv.WaitFor(t, 20*time.Second, "the tasks ready at start delivered", delivered(before))

	// Idle now: every pop waits for an announcement. Tasks made ready
	// now are delivered long before the 30 s fetch timeout ends a wait.
	testenv.WaitFor(t, 10*time.Second, "the worker subscribed on every node", func() (bool, string) {
		n := w.popper.(*clusterPopper).hub.Conns()
		return n >= 3, fmt.Sprintf("%d pub/sub connections", n)
	})
	for round := range 3 {
		start := time.Now()
		later := append(ready("q", fmt.Sprintf("late%d-", round), 50), ready("flow", fmt.Sprintf("late%d-flow-", round), 5)...)
		testenv.WaitFor(t, 20*time.Second, fmt.Sprintf("round %d delivered after the announcements", round), delivered(later))
		t.Logf("round %d: 55 tasks made ready on an idle worker delivered within %v", round, time.Since(start).Round(time.Millisecond))
	}
	mu.Lock()
	for id, n := range runs {
		if n != 1 {
			t.Errorf("%s ran %d times", id, n)
		}
	}
	mu.Unlock()

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
	rc := testenv.StartRedisCluster(t, 3, 1)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs(), ClusterStateReloadInterval: 2 * time.Second})
	defer cc.Close()
	const clusterShards = 16
	l, err := shard.NewLayout(ns, clusterShards)
	if err != nil {
		t.Fatal(err)
	}
	store := shard.NewStore(cc, l)
	ctx := testenv.Ctx(t, 2*time.Minute)
	policy := shardtest.Policy()
	policy.MaxPayload = 1024
	if err := store.RegisterQueues(ctx, map[string]shard.QueuePolicy{"q": policy}); err != nil {
		t.Fatal(err)
	}
	w, err := New(cc, Config{Namespace: ns, Shards: clusterShards, FetchTimeout: 30 * time.Second, ShutdownGrace: time.Second, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	runs := map[string]int{}
	if err := w.Handle("q", func(_ context.Context, task *Task) error {
		mu.Lock()
		defer mu.Unlock()
		runs[task.ID]++
		return nil
	}, QueueOptions{Concurrency: 8}); err != nil {
		t.Fatal(err)
	}
	// ready makes one task ready in every shard; a call refused while
	// the cluster fails over is retried.
	ready := func(prefix string) []string {
		var ids []string
		for sh := range clusterShards {
			for i := 0; ; i++ {
				if id := fmt.Sprintf("%s%d", prefix, i); l.ShardOf(id) == sh {
					ids = append(ids, id)
					break
				}
			}
		}
		testenv.WaitFor(t, 30*time.Second, "tasks enqueued and moved", func() (bool, string) {
			args := make([]shard.EnqueueArgs, len(ids))
			for i, id := range ids {
				args[i] = shard.EnqueueArgs{ID: id, Queue: "q", MaxRetries: -1, Payload: []byte("p")}
			}
			for _, r := range store.EnqueueBatch(ctx, args) {
				if r.Err != nil && !errors.Is(r.Err, shard.ErrDuplicate) {
					return false, r.Err.Error()
				}
			}
			for sh := range clusterShards {
				if _, err := store.MoveAhead(ctx, sh, shardtest.Epoch, 1000, 0); err != nil {
					return false, err.Error()
				}
			}
			return true, ""
		})
		return ids
	}
	delivered := func(ids []string) func() (bool, string) {
		return func() (bool, string) {
			mu.Lock()
			defer mu.Unlock()
			var missing []string
			for _, id := range ids {
				if runs[id] == 0 {
					missing = append(missing, id)
				}
			}
			return len(missing) == 0, fmt.Sprintf("not delivered: %v", missing)
		}
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(runCtx) }()
	defer func() { cancel(); <-done }()
	testenv.WaitFor(t, 20*time.Second, "a task of every shard delivered", delivered(ready("before-")))

	victim := rc.PrimaryFor(l.Tag(0))
	victim.Kill()
	killed := time.Now()
	defer victim.Restart() // it rejoins as a replica; go-redis's re-dialling goroutine then ends
	after := ready("after-")
	testenv.WaitFor(t, 25*time.Second, "a task of every shard made ready after the kill delivered", delivered(after))
	t.Logf("primary of shard 0 SIGKILLed: every shard's task made ready after the kill delivered %v after it", time.Since(killed).Round(time.Millisecond))
}
