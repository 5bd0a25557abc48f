package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/keyslot"
	"github.com/hourglass-sched/hourglass/internal/localrun"
)

// ClusterSlots is the number of hash slots of a Redis Cluster.
const ClusterSlots = keyslot.Slots

// clusterNodeTimeout is the cluster-node-timeout of a cluster with
// replicas: small, so that a killed primary is failed over within a few
// seconds. A cluster without replicas cannot fail over, and there a small
// timeout only hurts: on a loaded 2-core machine a node slow to answer
// for a second was marked failed and the whole cluster answered
// CLUSTERDOWN, so such clusters get soloNodeTimeout.
const (
	clusterNodeTimeout = 1000 * time.Millisecond
	soloNodeTimeout    = 10 * time.Second
)

// clusterReadyTimeout bounds how long a cluster may take to form or to
// converge after a change.
const clusterReadyTimeout = 30 * time.Second

// migrateBatch is how many keys MigrateSlot moves per MIGRATE command,
// and migrateTimeout the I/O timeout it gives MIGRATE.
const (
	migrateBatch   = 100
	migrateTimeout = 5 * time.Second
)

// RedisCluster is a Redis Cluster of redis-server processes started for
// one test. Its nodes listen on free loopback ports, keep their data and
// nodes.conf in temporary directories and are stopped at cleanup.
type RedisCluster struct {
	// Nodes are all the cluster's servers: the initial primaries first,
	// then the replicas. Roles change with failovers; Primaries and
	// Replicas report the current ones.
	Nodes []*ClusterNode
	t     testing.TB

	mu      sync.Mutex
	clients map[string]*redis.Client // by address, for the helpers' own use
	// migrating is held by a MIGRATE in flight (Migrate).
	migrating sync.Mutex
}

// ClusterNode is one server of a RedisCluster.
type ClusterNode struct {
	*Redis
	// ID is the node's cluster node ID.
	ID string
}

// StartRedisCluster starts primaries×(1+replicasPerPrimary) redis-server
// processes in cluster mode (in parallel), joins the primaries with
// redis-cli --cluster create and the replicas with CLUSTER MEET and
// CLUSTER REPLICATE (primary k gets nodes primaries+k, primaries+k+
// primaries, ...), and waits until every node reports
// cluster_state:ok with all 16384 slots covered, knows every other node
// and agrees on the topology, and every replica's link to its primary is
// up. redis-cli requires at least 3 primaries.
func StartRedisCluster(t testing.TB, primaries, replicasPerPrimary int) *RedisCluster {
	t.Helper()
	if primaries < 3 || replicasPerPrimary < 0 {
		t.Fatalf("testenv: StartRedisCluster(%d, %d): a cluster needs at least 3 primaries and no negative replica count", primaries, replicasPerPrimary)
	}
	LookBinary(t, "redis-server")
	cli := LookBinary(t, "redis-cli")

	n := primaries * (1 + replicasPerPrimary)
	dirs := make([]string, n)
	for i := range dirs {
		dirs[i] = t.TempDir()
	}
	srvs := make([]*localrun.Redis, n)
	errs := make([]error, n)
	timeout := clusterNodeTimeout
	if replicasPerPrimary == 0 {
		timeout = soloNodeTimeout
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { srvs[i], errs[i] = startClusterNode(dirs[i], timeout) })
	}
	wg.Wait()
	c := &RedisCluster{t: t, clients: map[string]*redis.Client{}}
	t.Cleanup(c.closeClients)
	for i, srv := range srvs {
		if srv != nil {
			c.Nodes = append(c.Nodes, &ClusterNode{Redis: &Redis{Process: watch(t, srv.Proc), Addr: srv.Addr, Dir: srv.Dir, srv: srv}})
		} else if errs[i] == nil {
			errs[i] = errors.New("no server")
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("testenv: start cluster nodes: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), clusterReadyTimeout)
	defer cancel()
	for _, node := range c.Nodes {
		id, err := c.client(node).ClusterMyID(ctx).Result()
		if err != nil {
			t.Fatalf("testenv: CLUSTER MYID on %s: %v", node.Addr, err)
		}
		node.ID = id
	}
	// The primaries with redis-cli; the replicas by hand: with every node
	// on one host, redis-cli's replica placement has been seen to make a
	// node a replica of itself and leave it out of the cluster.
	args := []string{"--cluster", "create"}
	for _, node := range c.Nodes[:primaries] {
		args = append(args, node.Addr)
	}
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("testenv: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	if err := c.addReplicas(ctx, primaries); err != nil {
		t.Fatalf("testenv: add replicas: %v", err)
	}
	if err := c.WaitConsistent(ctx); err != nil {
		t.Fatalf("testenv: cluster did not form: %v\nredis-cli output:\n%s", err, out)
	}
	// Primaries first, whichever nodes redis-cli chose.
	view := c.mustView()
	slices.SortStableFunc(c.Nodes, func(a, b *ClusterNode) int {
		pa, pb := view.byID[a.ID].primary, view.byID[b.ID].primary
		switch {
		case pa && !pb:
			return -1
		case pb && !pa:
			return 1
		}
		return 0
	})
	return c
}

// addReplicas makes the nodes after the first primaries replicas, node
// primaries+k of primary k mod primaries: each meets the first primary,
// waits until it knows its own primary, and replicates it.
func (c *RedisCluster) addReplicas(ctx context.Context, primaries int) error {
	if len(c.Nodes) == primaries {
		return nil
	}
	first := c.Nodes[0]
	nodes, err := c.client(first).ClusterNodes(ctx).Result()
	if err != nil {
		return err
	}
	var bus string
	for _, line := range strings.Split(nodes, "\n") {
		if f := strings.Fields(line); len(f) > 2 && strings.Contains(f[2], "myself") {
			_, bus, _ = strings.Cut(strings.Split(f[1], ",")[0], "@")
		}
	}
	host, port, err := net.SplitHostPort(first.Addr)
	if err != nil || bus == "" {
		return fmt.Errorf("the cluster bus address of %s in %q: %v", first.Addr, nodes, err)
	}
	for k, r := range c.Nodes[primaries:] {
		rc := c.client(r)
		if err := rc.Do(ctx, "CLUSTER", "MEET", host, port, bus).Err(); err != nil {
			return fmt.Errorf("CLUSTER MEET from %s: %w", r.Addr, err)
		}
		p := c.Nodes[k%primaries]
		for {
			known, err := rc.ClusterNodes(ctx).Result()
			if err == nil && strings.Contains(known, p.ID) {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s never learnt of %s: %w", r.Addr, p.Addr, ctx.Err())
			case <-time.After(20 * time.Millisecond): // polling a server's state with a deadline
			}
		}
		if err := rc.ClusterReplicate(ctx, p.ID).Err(); err != nil {
			return fmt.Errorf("CLUSTER REPLICATE %s on %s: %w", p.Addr, r.Addr, err)
		}
	}
	return nil
}

// startClusterNode starts one cluster-mode redis-server with its data in
// dir and the given cluster-node-timeout. The cluster bus port is chosen explicitly (--cluster-port) rather
// than left at port+10000, which may be above 65535 for an ephemeral port.
func startClusterNode(dir string, nodeTimeout time.Duration) (*localrun.Redis, error) {
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var bus int
		if bus, err = localrun.FreePort(); err != nil {
			return nil, err
		}
		var srv *localrun.Redis
		srv, err = localrun.StartRedis(dir,
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", strconv.Itoa(int(nodeTimeout/time.Millisecond)),
			"--cluster-port", strconv.Itoa(bus),
			"--appendonly", "no", "--save", "",
			// A replica's first sync starts at once instead of after 5 s.
			"--repl-diskless-sync-delay", "0")
		if err == nil {
			return srv, nil
		}
	}
	return nil, err
}

// up reports whether the node's process runs and is not paused, so that
// it can answer.
func (n *ClusterNode) up() bool { return n.Running() && !n.Stopped() }

// client returns the helpers' plain client for one node, closed at
// cleanup.
func (c *RedisCluster) client(n *ClusterNode) *redis.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := c.clients[n.Addr]
	if cl == nil {
		o := helperOptions(n.Addr)
		o.ReadTimeout = migrateTimeout + time.Second // a MIGRATE may block that long
		cl = redis.NewClient(o)
		c.clients[n.Addr] = cl
	}
	return cl
}

func (c *RedisCluster) closeClients() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cl := range c.clients {
		cl.Close() // later helper calls fail with "client is closed"
	}
}

// Client returns a go-redis cluster client seeded with every node's
// address, with default options, closed at cleanup. It follows MOVED and
// ASK redirections (migrations, CLUSTER FAILOVER), but after a node is
// killed it keeps sending that node's slots there until it reloads its
// slot map, which go-redis v9 does only every ClusterStateReloadInterval
// (60 s) (redis/go-redis#3979): call ReloadState after such a failover.
func (c *RedisCluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr
	}
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { cl.Close() })
	return cl
}

// Node returns the node listening on addr, or nil.
func (c *RedisCluster) Node(addr string) *ClusterNode {
	for _, n := range c.Nodes {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

// Primaries returns the current primaries, in Nodes order, as the first
// reachable node sees them. It fails the test if no node answers; call it
// from the test's goroutine.
func (c *RedisCluster) Primaries() []*ClusterNode {
	c.t.Helper()
	return c.withRole(true)
}

// Replicas returns the current replicas, in Nodes order, as the first
// reachable node sees them. It fails the test if no node answers; call it
// from the test's goroutine.
func (c *RedisCluster) Replicas() []*ClusterNode {
	c.t.Helper()
	return c.withRole(false)
}

// IsPrimary reports whether n is currently a primary (see Primaries).
func (c *RedisCluster) IsPrimary(n *ClusterNode) bool {
	c.t.Helper()
	e, ok := c.mustView().byID[n.ID]
	return ok && e.primary
}

// Addrs returns the addresses of the current primaries (see Primaries).
func (c *RedisCluster) Addrs() []string {
	c.t.Helper()
	var addrs []string
	for _, n := range c.Primaries() {
		addrs = append(addrs, n.Addr)
	}
	return addrs
}

func (c *RedisCluster) withRole(primary bool) []*ClusterNode {
	c.t.Helper()
	view := c.mustView()
	var out []*ClusterNode
	for _, n := range c.Nodes {
		if e, ok := view.byID[n.ID]; ok && e.primary == primary {
			out = append(out, n)
		}
	}
	return out
}

// NodeForSlot returns the primary that serves slot, as the first
// reachable node sees it. It fails the test if no node answers or the slot
// is unassigned; call it from the test's goroutine.
func (c *RedisCluster) NodeForSlot(slot int) *ClusterNode {
	c.t.Helper()
	view := c.mustView()
	id := view.owner[slot]
	if id == "" {
		c.t.Fatalf("testenv: slot %d has no owner", slot)
	}
	return c.byID(id)
}

// SlotsOf returns the slots node n serves, in ascending order.
func (c *RedisCluster) SlotsOf(n *ClusterNode) []int {
	c.t.Helper()
	view := c.mustView()
	var out []int
	for slot, id := range view.owner {
		if id == n.ID {
			out = append(out, slot)
		}
	}
	return out
}

// PrimaryFor returns the primary that serves key (see NodeForSlot).
func (c *RedisCluster) PrimaryFor(key string) *ClusterNode {
	c.t.Helper()
	return c.NodeForSlot(KeySlot(key))
}

func (c *RedisCluster) byID(id string) *ClusterNode {
	for _, n := range c.Nodes {
		if n.ID == id {
			return n
		}
	}
	c.t.Fatalf("testenv: unknown cluster node %s", id)
	return nil
}

// mustView returns the topology as the first answering node sees it.
func (c *RedisCluster) mustView() *clusterView {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var errs []error
	for _, n := range c.Nodes {
		if !n.up() {
			continue
		}
		v, err := c.view(ctx, n)
		if err == nil {
			return v
		}
		errs = append(errs, err)
	}
	c.t.Fatalf("testenv: no cluster node answers CLUSTER NODES: %v", errors.Join(errs...))
	return nil
}
