package scheduler

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/config"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestReadinessFollowsTheNodesOfOwnedShards (issue 24, item 10): on a
// Redis Cluster /readyz was one PING to whichever node go-redis picked,
// so a paused primary serving the replica's shard left it ready two
// times in three. Now it pings each primary that serves an owned shard:
// pausing (SIGSTOP) that primary turns it 503 naming the node, every
// time; pausing a primary that serves none leaves it ready; killing the
// shard's primary turns it 503 again.
func TestReadinessFollowsTheNodesOfOwnedShards(t *testing.T) {
	t.Parallel()
	c := testenv.StartRedisCluster(t, 3, 0)
	e := testenv.StartEtcd(t)
	cfg := config.Default()
	cfg.Shards = 1 // one shard: one primary serves it, two serve none
	cfg.Redis.Mode, cfg.Redis.Addrs = "cluster", c.Addrs()
	cfg.Etcd.Endpoints = []string{e.Endpoint}
	cfg.Scheduler.ReplicaID = "r1"
	cfg.Scheduler.LeaseTTL = 2 * time.Second
	cfg.HTTP.Addr = "127.0.0.1:0"
	s, _ := runReplica(t, cfg)
	url := "http://" + s.listener.Addr().String() + "/readyz"
	readyz := func() (int, string) { return get(t, url) }
	testenv.WaitFor(t, 30*time.Second, "ready, owning shard 0", func() (bool, string) {
		code, body := readyz()
		return code == 200 && len(s.Owned()) == 1, fmt.Sprint(code, body)
	})
	l, err := shard.NewLayout(cfg.Namespace, 1)
	if err != nil {
		t.Fatal(err)
	}
	owning := c.PrimaryFor(l.Tag(0))
	var other *testenv.ClusterNode
	for _, p := range c.Primaries() {
		if p != owning {
			other = p
			break
		}
	}

	other.Pause()
	for range 5 {
		if code, body := readyz(); code != 200 {
			t.Fatalf("a primary serving no owned shard paused: %d %s, want ready", code, body)
		}
	}
	other.Resume()

	owning.Pause()
	for k := range 5 {
		code, body := readyz()
		if code != 503 || !strings.Contains(body, owning.Addr) || !strings.Contains(body, "shards 0") {
			owning.Resume()
			t.Fatalf("check %d with the owned shard's primary paused: %d %q, want 503 naming %s", k, code, body, owning.Addr)
		}
	}
	owning.Resume()
	testenv.WaitFor(t, 10*time.Second, "ready again", func() (bool, string) {
		code, body := readyz()
		return code == 200, fmt.Sprint(code, body)
	})

	owning.Kill()
	testenv.WaitFor(t, 10*time.Second, "503 naming the killed primary", func() (bool, string) {
		code, body := readyz()
		return code == 503 && strings.Contains(body, owning.Addr), fmt.Sprint(code, body)
	})
}
