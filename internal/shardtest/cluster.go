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
	// Options name the namespace, the shard count and the queues, as
	// for New, but the namespace defaults to "hourglass" (a client's
	// default) and the count to 16.
	Options
	// Replicas is how many replicas each of the three primaries has.
	Replicas int
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

// NewCluster starts a Redis Cluster and registers the queues of o (as
// New does: nil registers Queue, NoQueues none). It fails the test unless the shards spread over all three primaries,
// which the tests that show the spread rely on.
func NewCluster(t testing.TB, o ClusterOptions) *Cluster {
	t.Helper()
	if o.Namespace == "" {
		o.Namespace = "hourglass"
	}
	if o.Shards == 0 {
		o.Shards = 16
	}
	rc := testenv.StartRedisCluster(t, 3, o.Replicas)
	copt := o.Client
	for _, n := range rc.Nodes {
		copt.Addrs = append(copt.Addrs, n.Addr)
	}
	c := &Cluster{T: t, Redis: rc, RDB: redis.NewClusterClient(&copt)}
	t.Cleanup(func() { c.RDB.Close() })
	c.Store = shard.NewStore(c.RDB, o.layout(t))
	if spread := c.Spread(); len(spread) != 3 {
		t.Fatalf("shardtest: %d shards on %d primaries, want all 3: %v", o.Shards, len(spread), spread)
	}
	o.register(t, c.Store)
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
