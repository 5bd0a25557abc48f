package e2e_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/internal/election"
	"github.com/hourglass-sched/hourglass/internal/scheduler"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

const (
	nShards = 16
	ttl     = 2 * time.Second // lease TTL used by these tests (etcd's minimum)
	prefix  = "/hourglass/"
)

// cluster is a real Redis and etcd plus the scheduler and worker
// binaries.
type cluster struct {
	t     *testing.T
	bin   string
	wbin  string
	redis *testenv.Redis // with withSentinel, the first primary; nil with withRedisCluster
	// sentinel is set by withSentinel, redisCluster by withRedisCluster.
	sentinel     *testenv.SentinelSetup
	redisCluster *testenv.RedisCluster
	// redisArgs are the binaries' settings that reach Redis.
	redisArgs []string
	etcd      *testenv.Etcd
	rdb       redis.UniversalClient
	ecli      *clientv3.Client
	store     *shard.Store
	cli       *client.Client
}

// clusterOption adjusts how newCluster starts the servers.
type clusterOption func(*clusterOptions)

type clusterOptions struct {
	redis    []testenv.RedisOption
	sentinel bool
	cluster  bool
}

// withRedisCluster runs Redis as a Redis Cluster of three primaries; the
// binaries and the test's clients use redis.mode cluster.
func withRedisCluster() clusterOption {
	return func(o *clusterOptions) { o.cluster = true }
}

// withSentinel runs Redis as a primary, a replica and three Sentinels;
// the binaries and the test's clients find the primary through the
// Sentinels (redis.mode sentinel).
func withSentinel() clusterOption {
	return func(o *clusterOptions) { o.sentinel = true }
}

// withRedis starts redis-server with opts (for example
// testenv.WithRedisArgs("--appendonly", "yes")).
func withRedis(opts ...testenv.RedisOption) clusterOption {
	return func(o *clusterOptions) { o.redis = append(o.redis, opts...) }
}

func newCluster(t *testing.T, opts ...clusterOption) *cluster {
	t.Helper()
	var o clusterOptions
	for _, opt := range opts {
		opt(&o)
	}
	bins := testenv.BuildBinaries(t, "./cmd/scheduler", "./cmd/worker")
	c := &cluster{t: t, bin: bins[0], wbin: bins[1]}
	switch {
	case o.cluster:
		c.redisCluster = testenv.StartRedisCluster(t, 3, 0)
		c.rdb = c.redisCluster.Client(t)
		c.redisArgs = []string{"-set", "redis.mode=cluster", "-set", "redis.addr=",
			"-set", "redis.addrs=" + strings.Join(c.redisCluster.Addrs(), ",")}
	case o.sentinel:
		c.sentinel = testenv.StartSentinel(t)
		c.redis = c.sentinel.Primary
		c.rdb = c.sentinel.FailoverClient(t)
		c.redisArgs = []string{"-set", "redis.mode=sentinel", "-set", "redis.addr=",
			"-set", "redis.addrs=" + strings.Join(c.sentinel.SentinelAddrs, ","), "-set", "redis.master_name=" + c.sentinel.MasterName}
	default:
		c.redis = testenv.StartRedis(t, o.redis...)
		c.rdb = c.redis.Client(t)
		c.redisArgs = []string{"-set", "redis.addr=" + c.redis.Addr}
	}
	c.etcd = testenv.StartEtcd(t)
	c.ecli = c.etcd.Client(t)
	l, _ := shard.NewLayout("hourglass", nShards)
	c.store = shard.NewStore(c.rdb, l)
	var err error
	if c.cli, err = client.New(c.rdb, client.Config{Shards: nShards}); err != nil {
		t.Fatal(err)
	}
	return c
}

// sched is one scheduler process.
type sched struct {
	*testenv.Process
	id   string
	http string
}

func (c *cluster) start(id string, extra ...string) *sched {
	c.t.Helper()
	args := []string{
		"-set", "scheduler.replica_id=" + id,
		"-set", fmt.Sprintf("scheduler.lease_ttl=%s", ttl),
	}
	return c.spawn(id, c.bin, append(args, extra...), nil)
}

// startWorker starts the worker binary; extra carries its queue settings.
func (c *cluster) startWorker(id string, extra ...string) *sched {
	c.t.Helper()
	return c.spawn(id, c.wbin, extra, nil)
}

// spawn starts bin with the cluster's connection settings, then extra;
// env is added to the test's environment.
func (c *cluster) spawn(id, bin string, extra, env []string) *sched {
	c.t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(c.t))
	args := append(slices.Clone(c.redisArgs),
		"-set", "etcd.endpoints="+c.etcd.Endpoint,
		"-set", fmt.Sprintf("shards=%d", nShards),
		"-set", "http.addr="+addr,
		"-set", "log.level=debug",
	)
	p := testenv.StartProcess(c.t, id, bin, append(args, extra...), env)
	return &sched{Process: p, id: id, http: addr}
}

// owners reads shard ownership from etcd: shard -> replica and epoch.
func (c *cluster) owners() (map[int]string, map[int]int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := c.ecli.Get(ctx, prefix+"shards/", clientv3.WithPrefix())
	own, ep := map[int]string{}, map[int]int64{}
	if err != nil {
		return own, ep
	}
	for _, kv := range resp.Kvs {
		var sh int
		if _, err := fmt.Sscanf(strings.TrimPrefix(string(kv.Key), prefix+"shards/"), "%d", &sh); err == nil {
			own[sh] = string(kv.Value)
			ep[sh] = kv.CreateRevision
		}
	}
	return own, ep
}

// settled reports whether all shards are owned by exactly the given
// replicas, balanced (floor or ceil of N/R each), and every owner's mover
// has run (the Redis epoch equals the etcd ownership revision).
func (c *cluster) settled(ids ...string) (bool, string) {
	own, ep := c.owners()
	if len(own) != nShards {
		return false, fmt.Sprintf("%d of %d shards owned: %v", len(own), nShards, own)
	}
	count := map[string]int{}
	for _, r := range own {
		count[r]++
	}
	lo, hi := nShards/len(ids), (nShards+len(ids)-1)/len(ids)
	for _, id := range ids {
		if count[id] < lo || count[id] > hi {
			return false, fmt.Sprintf("unbalanced: %v", count)
		}
	}
	if len(count) != len(ids) {
		return false, fmt.Sprintf("owners %v, want %v", count, ids)
	}
	for sh, e := range ep {
		if got, _ := c.store.StoredEpoch(context.Background(), sh); got != e {
			return false, fmt.Sprintf("shard %d: redis epoch %d, etcd %d", sh, got, e)
		}
	}
	return true, fmt.Sprint(count)
}

func (c *cluster) shardsOf(id string) []int {
	own, _ := c.owners()
	var out []int
	for sh, r := range own {
		if r == id {
			out = append(out, sh)
		}
	}
	sort.Ints(out)
	return out
}

// takenOver reports whether every shard in shards is owned by another
// replica than gone and that owner's mover has stored its epoch.
func (c *cluster) takenOver(gone string, shards []int) (bool, string) {
	own, ep := c.owners()
	for _, sh := range shards {
		if own[sh] == "" || own[sh] == gone {
			return false, fmt.Sprintf("shard %d owned by %q", sh, own[sh])
		}
		if got, _ := c.store.StoredEpoch(context.Background(), sh); got != ep[sh] {
			return false, fmt.Sprintf("shard %d: mover of %s not run yet", sh, own[sh])
		}
	}
	return true, ""
}

// status fetches a scheduler's /v1/status.
func (s *sched) status() (scheduler.Status, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return scheduler.FetchStatus(ctx, s.http)
}

// Ensure the election's key layout is the one this harness reads.
var _ = func() bool {
	if election.ShardKey(prefix, 3) != prefix+"shards/0003" {
		fmt.Fprintln(os.Stderr, "election key layout changed; update the e2e harness")
		os.Exit(1)
	}
	return true
}()
