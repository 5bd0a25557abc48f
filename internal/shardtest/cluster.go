package shardtest

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// ClusterOptions shape a Cluster. Zero fields take the defaults given.
type ClusterOptions struct {
	// Namespace defaults to "hourglass"; Shards to 16.
	Namespace string
	Shards    int
	// Replicas is how many replicas each of the three primaries has.
	Replicas int
	// Queues are registered with their policies (a zero MaxPayload
	// becomes 1 KiB); nil registers none (a test of registration does
	// its own).
	Queues map[string]shard.QueuePolicy
	// Client is the options of RDB; Addrs is set to the nodes'.
	Client redis.ClusterOptions
}

// Cluster is a Redis Cluster of three primaries with Hourglass's layout:
// shards whose hash tags spread over every primary, and queues
// registered. The client, inspect and worker tests run on it.
type Cluster struct {
	T     testing.TB
	Redis *testenv.RedisCluster
	// RDB is a cluster client for the test's own calls and for the
	// component under test; closed at cleanup.
	RDB   *redis.ClusterClient
	Store *shard.Store
}

// NewCluster starts a Redis Cluster and registers the queues of o. It
// fails the test unless the shards spread over all three primaries,
// which the tests that show the spread rely on.
func NewCluster(t testing.TB, o ClusterOptions) *Cluster {
	t.Helper()
	if o.Namespace == "" {
		o.Namespace = "hourglass"
	}
	if o.Shards == 0 {
		o.Shards = 16
	}
	l, err := shard.NewLayout(o.Namespace, o.Shards)
	if err != nil {
		t.Fatal(err)
	}
	rc := testenv.StartRedisCluster(t, 3, o.Replicas)
	copt := o.Client
	for _, n := range rc.Nodes {
		copt.Addrs = append(copt.Addrs, n.Addr)
	}
	c := &Cluster{T: t, Redis: rc, RDB: redis.NewClusterClient(&copt)}
	t.Cleanup(func() { c.RDB.Close() })
	c.Store = shard.NewStore(c.RDB, l)
	if spread := c.Spread(); len(spread) != 3 {
		t.Fatalf("shardtest: %d shards on %d primaries, want all 3: %v", o.Shards, len(spread), spread)
	}
	if o.Queues != nil {
		ps := make(map[string]shard.QueuePolicy, len(o.Queues))
		for q, p := range o.Queues {
			if p.MaxPayload == 0 {
				p.MaxPayload = 1024
			}
			ps[q] = p
		}
		if err := c.Store.RegisterQueues(testenv.Ctx(t, 30*time.Second), ps); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// Layout returns the store's key layout.
func (c *Cluster) Layout() shard.Layout { return c.Store.Layout() }

// Spread returns how many shards each primary serves, by address.
func (c *Cluster) Spread() map[string]int {
	c.T.Helper()
	l := c.Layout()
	out := map[string]int{}
	for sh := range l.Shards() {
		out[c.Redis.PrimaryFor(l.Tag(sh)).Addr]++
	}
	return out
}

// Ready enqueues tasks of queue due now (payload "p") and moves them into
// their ready lists, with Epoch, as a scheduler does. Calls refused while
// the cluster fails over are retried, for up to 30 s.
func (c *Cluster) Ready(queue string, ids ...string) {
	c.T.Helper()
	ctx := testenv.Ctx(c.T, time.Minute)
	args := make([]shard.EnqueueArgs, len(ids))
	for i, id := range ids {
		args[i] = shard.EnqueueArgs{ID: id, Queue: queue, MaxRetries: -1, Payload: []byte("p")}
	}
	testenv.WaitFor(c.T, 30*time.Second, "tasks enqueued and moved", func() (bool, string) {
		for _, r := range c.Store.EnqueueBatch(ctx, args) {
			if r.Err != nil && !errors.Is(r.Err, shard.ErrDuplicate) {
				return false, r.Err.Error()
			}
		}
		for sh := range c.Layout().Shards() {
			if _, err := c.Store.MoveAhead(ctx, sh, Epoch, 1000, 0); err != nil {
				return false, err.Error()
			}
		}
		return true, ""
	})
}
