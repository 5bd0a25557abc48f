package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/keyslot"
	"github.com/hourglass-sched/hourglass/internal/localrun"
)

// The cluster scenario's environment: a Redis Cluster of primaries on
// loopback, with the shards spread over them by moving whole shard slots.

// startClusterEnv starts a Redis Cluster of primaries nodes (no
// replicas), spreads the shards' slots evenly over them, then etcd and two
// schedulers in redis.mode cluster.
func startClusterEnv(ctx context.Context, logf func(string, ...any), shards, primaries int) (*env, error) {
	e, err := newEnv(ctx, logf, shards)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			e.stop()
		}
	}()
	if err := e.startCluster(ctx, primaries); err != nil {
		return nil, err
	}
	if err := e.balanceShards(ctx); err != nil {
		return nil, err
	}
	c := e.spread
	logf("Redis Cluster of %d primaries (%s); shards per node %s with the created slot ranges, %s after moving %d shard slots",
		primaries, strings.Join(e.nodeAddrs(), ", "), spreadString(counts(c.before, primaries)), spreadString(counts(c.after, primaries)), len(c.moves))
	e.hgAdmin = e.dial(e.hgAdminN)
	if err := e.startSchedulers(ctx); err != nil {
		return nil, err
	}
	ok = true
	return e, nil
}

// startCluster starts the nodes, joins them with redis-cli --cluster
// create (even slot ranges) and waits until they agree.
func (e *env) startCluster(ctx context.Context, primaries int) error {
	cli, err := localrun.Look("redis-cli")
	if err != nil {
		return err
	}
	for i := range primaries {
		dir := filepath.Join(e.dir, fmt.Sprintf("cluster-node-%d", i+1))
		if err := os.Mkdir(dir, 0o755); err != nil {
			return err
		}
		r, err := startClusterNode(dir)
		if err != nil {
			return err
		}
		n := &clusterNode{Redis: r, adminN: newCmdCounter()}
		n.admin = redis.NewClient(&redis.Options{Addr: r.Addr})
		n.admin.AddHook(n.adminN)
		e.nodes = append(e.nodes, n)
		if n.id, err = n.admin.ClusterMyID(ctx).Result(); err != nil {
			return fmt.Errorf("CLUSTER MYID on %s: %w", r.Addr, err)
		}
	}
	args := append([]string{"--cluster", "create"}, e.nodeAddrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("redis-cli %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return e.waitCluster(ctx, nil)
}

// startClusterNode starts one cluster-mode redis-server with its data in
// dir (localrun: no persistence). The bus port is chosen explicitly
// rather than left at port+10000, which may be above 65535 for an
// ephemeral port; cluster-node-timeout keeps its default (15 s): no
// failover is wanted while two cores are busy.
func startClusterNode(dir string) (*localrun.Redis, error) {
	var err error
	for range 3 {
		var bus int
		if bus, err = localrun.FreePort(); err != nil {
			return nil, err
		}
		var r *localrun.Redis
		r, err = localrun.StartRedis(dir, "--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"), "--cluster-port", strconv.Itoa(bus))
		if err == nil {
			return r, nil
		}
	}
	return nil, err
}

// waitCluster waits until every node reports cluster_state:ok with all
// slots covered and knows every node, no slot is importing or migrating,
// all nodes report the same slot map, and in it slot s is served by node
// ID want[s] for each entry of want.
func (e *env) waitCluster(ctx context.Context, want map[int]string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		err := e.checkCluster(ctx, want)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the cluster to agree: %w (last: %v)", ctx.Err(), err)
		case <-time.After(20 * time.Millisecond): // polling the nodes' views with a deadline
		}
	}
}

func (e *env) checkCluster(ctx context.Context, want map[int]string) error {
	var first string
	for _, n := range e.nodes {
		info, err := n.admin.ClusterInfo(ctx).Result()
		if err != nil {
			return fmt.Errorf("%s: CLUSTER INFO: %w", n.Addr, err)
		}
		f := map[string]string{}
		for _, l := range strings.Split(info, "\n") {
			if k, v, ok := strings.Cut(strings.TrimSpace(l), ":"); ok {
				f[k] = v
			}
		}
		if f["cluster_state"] != "ok" || f["cluster_slots_ok"] != strconv.Itoa(keyslot.Slots) || f["cluster_known_nodes"] != strconv.Itoa(len(e.nodes)) {
			return fmt.Errorf("%s: cluster_state:%s cluster_slots_ok:%s cluster_known_nodes:%s", n.Addr, f["cluster_state"], f["cluster_slots_ok"], f["cluster_known_nodes"])
		}
		// CLUSTER NODES shows a slot being moved as [slot->-id] or
		// [slot-<-id] on the nodes taking part.
		nodes, err := n.admin.ClusterNodes(ctx).Result()
		if err != nil {
			return fmt.Errorf("%s: CLUSTER NODES: %w", n.Addr, err)
		}
		if strings.Contains(nodes, "[") {
			return fmt.Errorf("%s: a slot is importing or migrating", n.Addr)
		}
		slots, err := n.admin.ClusterSlots(ctx).Result()
		if err != nil {
			return fmt.Errorf("%s: CLUSTER SLOTS: %w", n.Addr, err)
		}
		var sig []string
		for _, s := range slots {
			if len(s.Nodes) > 0 {
				sig = append(sig, fmt.Sprintf("%d-%d:%s", s.Start, s.End, s.Nodes[0].ID))
			}
		}
		sort.Strings(sig)
		if s := strings.Join(sig, " "); first == "" {
			first = s
		} else if s != first {
			return fmt.Errorf("%s disagrees with %s on the slot map", n.Addr, e.nodes[0].Addr)
		}
		for slot, id := range want {
			if got := slotOwner(slots, slot); got != id {
				return fmt.Errorf("%s: slot %d served by %q, want %s", n.Addr, slot, got, id)
			}
		}
	}
	return nil
}

// slotOwner returns the ID of the primary serving slot in a CLUSTER
// SLOTS reply, "" if none.
func slotOwner(slots []redis.ClusterSlot, slot int) string {
	for _, s := range slots {
		if s.Start <= slot && slot <= s.End && len(s.Nodes) > 0 {
			return s.Nodes[0].ID
		}
	}
	return ""
}

// balanceShards moves whole shard slots from the nodes with the most
// shards to those with the fewest until no move makes the spread more
// even (16 shards on 3 nodes: 6/5/5), as an operator would with redis-cli
// --cluster reshard. No key names change. It runs before anything is
// written, so each move is the documented procedure without the MIGRATE
// step: CLUSTER SETSLOT IMPORTING on the target, MIGRATING on the source,
// then SETSLOT NODE on the target (which bumps its config epoch, so the
// other nodes take its claim), the source and the others.
func (e *env) balanceShards(ctx context.Context) error {
	slots, err := e.nodes[0].admin.ClusterSlots(ctx).Result()
	if err != nil {
		return fmt.Errorf("CLUSTER SLOTS: %w", err)
	}
	index := map[string]int{}
	for i, n := range e.nodes {
		index[n.id] = i
	}
	nodeOf := func(slot int) (int, error) {
		i, ok := index[slotOwner(slots, slot)]
		if !ok {
			return 0, fmt.Errorf("slot %d served by no node of the bench", slot)
		}
		return i, nil
	}
	c := &e.spread
	c.before = make([]int, e.shards)
	slotOf := make([]int, e.shards)
	for sh := range e.shards {
		slotOf[sh] = keyslot.Of(e.layout.Tag(sh))
		if c.before[sh], err = nodeOf(slotOf[sh]); err != nil {
			return err
		}
	}
	if c.shared, err = nodeOf(keyslot.Of(e.layout.Paused())); err != nil {
		return err
	}
	c.after = slices.Clone(c.before)
	for {
		cnt := counts(c.after, len(e.nodes))
		hi, lo := 0, 0
		for i := range cnt {
			if cnt[i] > cnt[hi] {
				hi = i
			}
			if cnt[i] < cnt[lo] {
				lo = i
			}
		}
		// The highest-numbered shard of the busiest node whose slot (with
		// every shard on it) leaves both nodes below the busiest count.
		move := -1
		for sh := e.shards - 1; sh >= 0 && move < 0; sh-- {
			if c.after[sh] != hi {
				continue
			}
			k := 0
			for s2 := range e.shards {
				if slotOf[s2] == slotOf[sh] {
					k++
				}
			}
			if cnt[lo]+k < cnt[hi] {
				move = sh
			}
		}
		if move < 0 {
			break
		}
		slot := slotOf[move]
		if err := e.moveEmptySlot(ctx, slot, e.nodes[hi], e.nodes[lo]); err != nil {
			return err
		}
		for sh := range e.shards {
			if slotOf[sh] == slot {
				c.after[sh] = lo
				c.moves = append(c.moves, fmt.Sprintf("shard %d (slot %d): node %d → node %d", sh, slot, hi+1, lo+1))
			}
		}
	}
	want := map[int]string{}
	for sh, n := range c.after {
		want[slotOf[sh]] = e.nodes[n].id
	}
	return e.waitCluster(ctx, want)
}

// moveEmptySlot hands slot from one primary to another; the slot must
// hold no keys.
func (e *env) moveEmptySlot(ctx context.Context, slot int, from, to *clusterNode) error {
	if n, err := from.admin.ClusterCountKeysInSlot(ctx, slot).Result(); err != nil || n != 0 {
		return fmt.Errorf("move slot %d: %d keys in it (%v); the bench moves slots before writing any", slot, n, err)
	}
	setslot := func(n *clusterNode, args ...any) error {
		if err := n.admin.Do(ctx, append([]any{"CLUSTER", "SETSLOT", slot}, args...)...).Err(); err != nil {
			return fmt.Errorf("move slot %d: CLUSTER SETSLOT %v on %s: %w", slot, args, n.Addr, err)
		}
		return nil
	}
	if err := setslot(to, "IMPORTING", from.id); err != nil {
		return err
	}
	if err := setslot(from, "MIGRATING", to.id); err != nil {
		return err
	}
	order := []*clusterNode{to, from}
	for _, n := range e.nodes {
		if n != to && n != from {
			order = append(order, n)
		}
	}
	for _, n := range order {
		if err := setslot(n, "NODE", to.id); err != nil {
			return err
		}
	}
	return nil
}
