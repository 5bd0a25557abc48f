package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/localrun"
)

// ClusterSlots is the number of hash slots of a Redis Cluster.
const ClusterSlots = 16384

// clusterNodeTimeout is the nodes' cluster-node-timeout: small, so that a
// killed primary is failed over within a few seconds.
const clusterNodeTimeout = 1000 * time.Millisecond

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
}

// ClusterNode is one server of a RedisCluster.
type ClusterNode struct {
	*Redis
	// ID is the node's cluster node ID.
	ID string
}

// StartRedisCluster starts primaries×(1+replicasPerPrimary) redis-server
// processes in cluster mode (in parallel), joins them into one cluster
// with redis-cli --cluster create, and waits until every node reports
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
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { srvs[i], errs[i] = startClusterNode(dirs[i]) })
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
	args := []string{"--cluster", "create"}
	for _, node := range c.Nodes {
		args = append(args, node.Addr)
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(replicasPerPrimary), "--cluster-yes")
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("testenv: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
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

// startClusterNode starts one cluster-mode redis-server with its data in
// dir. The cluster bus port is chosen explicitly (--cluster-port) rather
// than left at port+10000, which may be above 65535 for an ephemeral port.
func startClusterNode(dir string) (*localrun.Redis, error) {
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
			"--cluster-node-timeout", strconv.Itoa(int(clusterNodeTimeout/time.Millisecond)),
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

// MigrateSlot moves slot, keys included, from the primary that serves it
// to the primary to, following the documented procedure: CLUSTER SETSLOT
// IMPORTING on the target, MIGRATING on the source, MIGRATE of the keys in
// batches, then CLUSTER SETSLOT NODE on the target, the source and every
// other primary. Clients keep working meanwhile (ASK and MOVED
// redirections). It returns once every running node agrees that to serves
// the slot. It may be called from any goroutine.
func (c *RedisCluster) MigrateSlot(ctx context.Context, slot int, to *ClusterNode) error {
	if slot < 0 || slot >= ClusterSlots {
		return fmt.Errorf("testenv: slot %d out of range", slot)
	}
	var from *ClusterNode
	var view *clusterView
	for _, n := range c.Nodes {
		if !n.up() {
			continue
		}
		v, err := c.view(ctx, n)
		if err != nil {
			continue
		}
		view = v
		break
	}
	if view == nil {
		return errors.New("testenv: migrate: no node answers CLUSTER NODES")
	}
	for _, n := range c.Nodes {
		if n.ID == view.owner[slot] {
			from = n
		}
	}
	if from == nil {
		return fmt.Errorf("testenv: migrate: slot %d has no owner", slot)
	}
	if e, ok := view.byID[to.ID]; !ok || !e.primary {
		return fmt.Errorf("testenv: migrate: target %s is not a primary", to.Addr)
	}
	if from == to {
		return nil
	}
	src, dst := c.client(from), c.client(to)
	if err := dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", from.ID).Err(); err != nil {
		return fmt.Errorf("testenv: migrate: SETSLOT IMPORTING on %s: %w", to.Addr, err)
	}
	if err := src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", to.ID).Err(); err != nil {
		return fmt.Errorf("testenv: migrate: SETSLOT MIGRATING on %s: %w", from.Addr, err)
	}
	host, port, err := net.SplitHostPort(to.Addr)
	if err != nil {
		return err
	}
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, slot, migrateBatch).Result()
		if err != nil {
			return fmt.Errorf("testenv: migrate: GETKEYSINSLOT on %s: %w", from.Addr, err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", host, port, "", 0, int(migrateTimeout / time.Millisecond), "REPLACE", "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := src.Do(ctx, args...).Err(); err != nil {
			return fmt.Errorf("testenv: migrate: MIGRATE %d keys from %s: %w", len(keys), from.Addr, err)
		}
	}
	// Target first, then source, then everyone else (CLUSTER SETSLOT docs).
	order := []*ClusterNode{to, from}
	for _, n := range c.Nodes {
		if n != to && n != from && view.byID[n.ID].primary && n.up() {
			order = append(order, n)
		}
	}
	for _, n := range order {
		if err := c.client(n).Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", to.ID).Err(); err != nil {
			return fmt.Errorf("testenv: migrate: SETSLOT NODE on %s: %w", n.Addr, err)
		}
	}
	return c.waitFor(ctx, fmt.Sprintf("all nodes to agree that %s serves slot %d", to.Addr, slot), func(v *clusterView) error {
		if v.owner[slot] != to.ID {
			return fmt.Errorf("slot %d served by %s", slot, v.owner[slot])
		}
		if v.pending {
			return errors.New("a slot is still importing or migrating")
		}
		return nil
	})
}

// Failover promotes replica to primary with CLUSTER FAILOVER, a
// coordinated failover that loses no acknowledged write (its primary must
// be reachable), and waits until every running node agrees and the cluster
// is ok again. It may be called from any goroutine.
func (c *RedisCluster) Failover(ctx context.Context, replica *ClusterNode) error {
	if err := c.client(replica).Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
		return fmt.Errorf("testenv: CLUSTER FAILOVER on %s: %w", replica.Addr, err)
	}
	if err := c.waitFor(ctx, replica.Addr+" to be primary", func(v *clusterView) error {
		if e, ok := v.byID[replica.ID]; !ok || !e.primary {
			return fmt.Errorf("%s is not a primary yet", replica.Addr)
		}
		return nil
	}); err != nil {
		return err
	}
	return c.WaitConsistent(ctx)
}

// WaitConsistent waits until every running node reports cluster_state:ok
// with all slots covered and knows every node, all of them agree on roles
// and slot ownership, no slot is being migrated, and every replica's link
// to its primary is up. Nodes that are not running (killed or paused) are
// ignored. It waits until ctx ends, at most 30 s, and may be called from
// any goroutine.
func (c *RedisCluster) WaitConsistent(ctx context.Context) error {
	return c.waitFor(ctx, "a consistent cluster", func(*clusterView) error { return nil })
}

// waitFor polls every running node until they report a healthy cluster,
// agree on its topology, and extra accepts that topology, or until ctx ends
// (or clusterReadyTimeout passes).
func (c *RedisCluster) waitFor(ctx context.Context, what string, extra func(*clusterView) error) error {
	ctx, cancel := context.WithTimeout(ctx, clusterReadyTimeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := c.check(ctx, extra)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testenv: waiting for %s: %w (last: %v)", what, ctx.Err(), err)
		case <-tick.C:
		}
	}
}

func (c *RedisCluster) check(ctx context.Context, extra func(*clusterView) error) error {
	var first *clusterView
	var firstAddr string
	for _, n := range c.Nodes {
		if !n.up() {
			continue
		}
		cl := c.client(n)
		info, err := cl.ClusterInfo(ctx).Result()
		if err != nil {
			return fmt.Errorf("%s: CLUSTER INFO: %w", n.Addr, err)
		}
		fields := infoFields(info)
		if fields["cluster_state"] != "ok" || fields["cluster_slots_ok"] != strconv.Itoa(ClusterSlots) {
			return fmt.Errorf("%s: cluster_state:%s cluster_slots_ok:%s", n.Addr, fields["cluster_state"], fields["cluster_slots_ok"])
		}
		if fields["cluster_known_nodes"] != strconv.Itoa(len(c.Nodes)) {
			return fmt.Errorf("%s: knows %s of %d nodes", n.Addr, fields["cluster_known_nodes"], len(c.Nodes))
		}
		v, err := c.view(ctx, n)
		if err != nil {
			return err
		}
		if first == nil {
			first, firstAddr = v, n.Addr
		} else if v.signature != first.signature {
			return fmt.Errorf("%s and %s disagree:\n%s\n---\n%s", firstAddr, n.Addr, first.signature, v.signature)
		}
		if v.pending {
			return fmt.Errorf("%s: a slot is importing or migrating", n.Addr)
		}
		if err := extra(v); err != nil {
			return fmt.Errorf("%s: %w", n.Addr, err)
		}
		if !v.byID[n.ID].primary {
			repl, err := cl.Info(ctx, "replication").Result()
			if err != nil {
				return fmt.Errorf("%s: INFO: %w", n.Addr, err)
			}
			if s := infoFields(repl)["master_link_status"]; s != "up" {
				return fmt.Errorf("%s: master_link_status:%s", n.Addr, s)
			}
		}
	}
	if first == nil {
		return errors.New("no node is running")
	}
	return nil
}

// infoFields parses the key:value lines of an INFO or CLUSTER INFO reply.
func infoFields(s string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m
}

// clusterView is one node's CLUSTER NODES reply, parsed.
type clusterView struct {
	byID  map[string]clusterEntry
	owner [ClusterSlots]string // node ID serving each slot
	// pending reports a slot in importing or migrating state on the node
	// that answered.
	pending bool
	// signature is the topology in a canonical form, to compare the views
	// of two nodes: IDs, addresses, roles and slots, without the
	// answering node's own flags and link state.
	signature string
}

type clusterEntry struct {
	addr    string
	primary bool
	master  string // primary's ID, for a replica
}

func (c *RedisCluster) view(ctx context.Context, n *ClusterNode) (*clusterView, error) {
	s, err := c.client(n).ClusterNodes(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("%s: CLUSTER NODES: %w", n.Addr, err)
	}
	v, err := parseClusterNodes(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", n.Addr, err)
	}
	return v, nil
}

// parseClusterNodes parses a CLUSTER NODES reply: one line per node,
// "<id> <ip:port@cport[,hostname]> <flags> <master> <ping-sent>
// <pong-recv> <config-epoch> <link-state> <slot>...".
func parseClusterNodes(s string) (*clusterView, error) {
	v := &clusterView{byID: map[string]clusterEntry{}}
	var sig []string
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("testenv: bad CLUSTER NODES line %q", line)
		}
		addr, _, _ := strings.Cut(f[1], "@")
		flags := strings.Split(f[2], ",")
		e := clusterEntry{addr: addr, primary: slices.Contains(flags, "master")}
		if !e.primary && f[3] != "-" {
			e.master = f[3]
		}
		v.byID[f[0]] = e
		var ranges []string
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				v.pending = true
				continue
			}
			lo, hi, isRange := strings.Cut(r, "-")
			a, err := strconv.Atoi(lo)
			if err != nil {
				return nil, fmt.Errorf("testenv: bad slot %q in CLUSTER NODES", r)
			}
			b := a
			if isRange {
				if b, err = strconv.Atoi(hi); err != nil {
					return nil, fmt.Errorf("testenv: bad slot %q in CLUSTER NODES", r)
				}
			}
			if a < 0 || b >= ClusterSlots || a > b {
				return nil, fmt.Errorf("testenv: bad slot %q in CLUSTER NODES", r)
			}
			for i := a; i <= b; i++ {
				v.owner[i] = f[0]
			}
			ranges = append(ranges, r)
		}
		sig = append(sig, fmt.Sprintf("%s %s primary=%t master=%s slots=%s", f[0], addr, e.primary, e.master, strings.Join(ranges, ",")))
	}
	sort.Strings(sig)
	v.signature = strings.Join(sig, "\n")
	return v, nil
}

// KeySlot returns the hash slot of key: CRC16 (XMODEM) of the key, or of
// its hash tag (the part between the first '{' and the next '}', when not
// empty), modulo 16384.
func KeySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % ClusterSlots
}
