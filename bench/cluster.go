package main

import (
	"context"
	"errors"
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

	"github.com/hourglass-sched/hourglass/internal/connect"
	"github.com/hourglass-sched/hourglass/internal/keyslot"
	"github.com/hourglass-sched/hourglass/internal/localrun"
)

// ---- 8. Redis Cluster ----

// clusterPrimaries is the cluster scenario's number of primaries: the
// fewest redis-cli --cluster create accepts.
const clusterPrimaries = 3

// clusterShareBar is the balance bar: no node does more than this share
// (percent) of the cluster's Redis work.
const clusterShareBar = 40

// clusterNode is one primary of a cluster env, with a plain client for
// INFO and CLUSTER commands; adminN counts that client's commands, which
// the figures subtract.
type clusterNode struct {
	*localrun.Redis
	id     string
	admin  *redis.Client
	adminN *cmdCounter
}

// shardSpread is how a cluster env's shards spread over its nodes: with
// the slot ranges redis-cli --cluster create gave (before), and after the
// bench moved some shards' slots (after). Both hold a node index per
// shard.
type shardSpread struct {
	before, after []int
	moves         []string // "shard 13 (slot 1234): node 3 → node 1"
	shared        int      // node serving the namespace's shared keys ({ns}:paused, :registered, :control)
}

// counts returns the number of shards per node of an assignment.
func counts(owner []int, nodes int) []int {
	c := make([]int, nodes)
	for _, n := range owner {
		c[n]++
	}
	return c
}

func spreadString(c []int) string {
	s := make([]string, len(c))
	for i, n := range c {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, "/")
}

func (e *env) nodeAddrs() []string {
	addrs := make([]string, len(e.nodes))
	for i, n := range e.nodes {
		addrs[i] = n.Addr
	}
	return addrs
}

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

// clusterSnapshot reads every node's counters (one INFO each, one node
// after the other) and adds them up; the result keeps the nodes' own
// snapshots.
func (e *env) clusterSnapshot(ctx context.Context, bench counters, pids []int) (rstats, error) {
	nodes := make([]rstats, len(e.nodes))
	var errs []error
	for i, n := range e.nodes {
		var err error
		if nodes[i], err = snapshot(ctx, n.admin, n.adminN, nil, nil); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", n.Addr, err))
		}
	}
	s := sumStats(nodes)
	s.bench, s.pids = bench.snap(), pids
	for _, pid := range pids {
		s.procs[pid] = procCPU(pid)
	}
	s.pidCPU = procCPU(os.Getpid())
	return s, errors.Join(errs...)
}

// putNodes stores the figures of each node of a cluster window in r, as
// node<i>_<key> (i from 1), for the cluster scenario to turn into rows:
// Redis CPU seconds, commands processed (and per task), CPU µs per task
// of the whole load, and the node's share of the nodes' CPU and commands.
func putNodes(r *row, w window, n int) {
	if len(w.nodes) == 0 {
		return
	}
	r.set("processed", float64(w.processed))
	var cpu float64
	var cmds int64
	for _, nw := range w.nodes {
		cpu += nw.cpu
		cmds += nw.processed
	}
	for i, nw := range w.nodes {
		p := fmt.Sprintf("node%d_", i+1)
		r.set(p+"rcpu", nw.cpu)
		r.set(p+"processed", float64(nw.processed))
		r.set(p+"cmds", float64(nw.processed)/float64(n))
		r.set(p+"rcpu_per_1k", 1e6*nw.cpu/float64(n))
		r.set(p+"cpu_share", 100*nw.cpu/cpu)
		r.set(p+"cmd_share", 100*float64(nw.processed)/float64(cmds))
	}
}

// takeNodes removes the node<i>_ figures from r and returns them by node.
func takeNodes(r *row) []map[string]float64 {
	var out []map[string]float64
	for k, v := range r.M {
		rest, ok := strings.CutPrefix(k, "node")
		if !ok {
			continue
		}
		num, key, ok := strings.Cut(rest, "_")
		i, err := strconv.Atoi(num)
		if !ok || err != nil || i < 1 {
			continue
		}
		for len(out) < i {
			out = append(out, map[string]float64{})
		}
		out[i-1][key] = v
		delete(r.M, k)
	}
	return out
}

// nodeRowsOf returns the node rows of a phase of the cluster scenario.
func nodeRowsOf(s *scenario, phase string) []row {
	var out []row
	for _, r := range s.Rows {
		if strings.HasPrefix(r.System, phase+", node ") {
			out = append(out, r)
		}
	}
	return out
}

// runCluster runs the burst and the steady scenario for Hourglass on a
// Redis Cluster of its own (three primaries, with etcd and two
// schedulers), its shards spread evenly over the nodes, and reports each
// node's share of the work.
func runCluster(ctx context.Context, o sizes, logf func(string, ...any)) *scenario {
	sc := &scenario{Name: "cluster",
		Title: fmt.Sprintf("Redis Cluster: %d primaries on loopback, %d shards; a burst of %d tasks, then %d tasks/s steady for %s; per node: Redis CPU and commands",
			clusterPrimaries, nShards, o.burstN, o.steadyRate, o.steadyDur),
		Cols: []col{{"shards", "shards", "%.0f"}, {"shards0", "shards, created slots", "%.0f"},
			{"drain", "drain/s", "%.0f"}, {"p50", "late p50 ms", "%.1f"}, {"p99", "p99 ms", "%.1f"}, {"lost", "lost", "%.0f"}, {"dups", "dups", "%.0f"},
			{"rcpu", "redis CPU s", "%.2f"}, {"processed", "cmds processed", "%.0f"}, {"cmds", "cmds/task", "%.1f"},
			{"rcpu_per_1k", "redis CPU µs/task", "%.1f"}, {"cpu_share", "CPU share %", "%.1f"}, {"cmd_share", "cmds share %", "%.1f"}}}
	logf("cluster: own Redis Cluster, etcd and schedulers")
	e, err := startClusterEnv(ctx, logf, nShards, clusterPrimaries)
	if err != nil {
		sc.Notes = append(sc.Notes, "cluster: "+err.Error())
		return sc
	}
	defer e.stop()
	c := e.spread
	before, after := counts(c.before, len(e.nodes)), counts(c.after, len(e.nodes))
	var addrs []string
	for i, n := range e.nodes {
		addrs = append(addrs, fmt.Sprintf("node %d %s", i+1, n.Addr))
	}
	busiest := slices.Max(before)
	sc.Notes = append(sc.Notes,
		fmt.Sprintf("%d redis-server primaries (cluster-enabled, no replicas, no persistence; %s) joined by redis-cli --cluster create, which gives each an even slot range; schedulers (2, redis.mode cluster), producer and worker on cluster clients (ClusterStateReloadInterval %s as in internal/connect); burst and steady rows measured as in the burst and steady scenarios",
			len(e.nodes), strings.Join(addrs, ", "), connect.ClusterStateReload),
		fmt.Sprintf("balance: the shards' hash tags {%s:0}..{%s:%d} land %s on the created slot ranges (the busiest node would hold %.0f%% of the shards); before writing anything the bench moved %d shard slots as redis-cli --cluster reshard would (CLUSTER SETSLOT IMPORTING/MIGRATING/NODE; no key names change): %s; now %s. The namespace's shared keys ({%s}:paused, :registered, :control) are on node %d",
			namespace, namespace, nShards-1, spreadString(before), 100*float64(busiest)/float64(nShards), len(c.moves), strings.Join(c.moves, "; "), spreadString(after), namespace, c.shared+1),
		"per node: redis CPU s = used_cpu_user + used_cpu_sys delta (INFO cpu); cmds processed = total_commands_processed delta (INFO stats; like commandstats it counts the commands scripts run) minus the bench's INFO calls; µs/task = the node's CPU ÷ all tasks handled (the node rows add up to the phase row); shares = the node's part of the nodes' total",
		"reading it: the 3 nodes, 2 schedulers, etcd and the bench process (producer, worker) share this machine's cores, so total throughput cannot grow with nodes here; a node's µs/task is what it spends per task of the whole load, so with a core per node the Redis side of the burst carries about 1e6 ÷ (the busiest node's µs/task) tasks/s (in the burst row's notes)")

	hg, err := newHG(e)
	if err != nil {
		sc.Notes = append(sc.Notes, "cluster: "+err.Error())
		return sc
	}
	defer hg.close()
	if err := hg.warmUp(ctx); err != nil {
		sc.Notes = append(sc.Notes, "cluster warm-up: "+err.Error())
		return sc
	}
	addClusterPhase(sc, "burst", runBurst(ctx, o, []system{hg}, logf), before, after)
	if ctx.Err() == nil {
		addClusterPhase(sc, "steady", runSteady(ctx, o, []system{hg}, logf), before, after)
	}
	for _, ph := range []string{"burst", "steady"} {
		var parts []string
		for _, r := range nodeRowsOf(sc, ph) {
			parts = append(parts, fmt.Sprintf("%s CPU %.1f%% cmds %.1f%%", strings.TrimPrefix(r.System, ph+", "), r.M["cpu_share"], r.M["cmd_share"]))
		}
		if len(parts) > 0 {
			logf("cluster %s: %s", ph, strings.Join(parts, ", "))
		}
	}
	return sc
}

// addClusterPhase adds the Hourglass row of a burst or steady run on the
// cluster to sc as the phase's row, followed by one row per node.
func addClusterPhase(sc *scenario, phase string, from *scenario, before, after []int) {
	if len(from.Rows) == 0 {
		sc.Notes = append(sc.Notes, phase+": no result")
		return
	}
	r := from.Rows[0]
	r.System = phase
	total := 0
	for _, n := range after {
		total += n
	}
	r.M["shards"] = float64(total)
	nodes := takeNodes(&r)
	r.note("all nodes: top-level calls %.2f/task, round trips %.2f/task (socket reads), Redis wake-ups %.2f/task", r.M["top"], r.M["reads"], r.M["wakes"])
	if v, ok := r.M["ocpu_per_1k"]; ok {
		r.note("enqueue %.0f tasks/s; schedulers and bench process (producer, worker) %.1f CPU µs/task", r.M["enq"], v)
	}
	var hi float64
	for _, m := range nodes {
		hi = max(hi, m["rcpu_per_1k"])
	}
	switch {
	case hi > 0 && phase == "burst":
		r.note("busiest node %.1f Redis CPU µs/task: with a core per node the Redis side would carry about %.0f tasks/s (that node at 100%% CPU)", hi, 1e6/hi)
	case hi > 0:
		r.note("busiest node %.1f Redis CPU µs/task: a cost, not a capacity — at this rate most script calls carry one task, so the per-call overhead dominates (docs/performance.md, shards and cost at low rates); the burst row gives the capacity", hi)
	}
	sc.Rows = append(sc.Rows, r)
	for i, m := range nodes {
		if i < len(after) {
			m["shards"], m["shards0"] = float64(after[i]), float64(before[i])
		}
		sc.Rows = append(sc.Rows, row{System: fmt.Sprintf("%s, node %d", phase, i+1), M: m})
	}
}

// clusterBalance states the balance bar: the highest node share of the
// Redis CPU and of the commands, in the burst and in the steady phase.
func clusterBalance(s *scenario) (value string, met, ok bool) {
	met = true
	var parts []string
	for _, ph := range []string{"burst", "steady"} {
		rows := nodeRowsOf(s, ph)
		if len(rows) == 0 {
			continue
		}
		var cpu, cmds float64
		var cpuAt, cmdsAt string
		for _, r := range rows {
			if v := r.M["cpu_share"]; v > cpu {
				cpu, cpuAt = v, strings.TrimPrefix(r.System, ph+", ")
			}
			if v := r.M["cmd_share"]; v > cmds {
				cmds, cmdsAt = v, strings.TrimPrefix(r.System, ph+", ")
			}
		}
		met = met && cpu <= clusterShareBar && cmds <= clusterShareBar
		parts = append(parts, fmt.Sprintf("%s: CPU %.1f%% (%s), cmds %.1f%% (%s)", ph, cpu, cpuAt, cmds, cmdsAt))
	}
	if len(parts) == 0 {
		return "", false, false
	}
	return strings.Join(parts, "; "), met, true
}

// compareStandalone adds to the cluster scenario, when the burst and
// steady scenarios ran too, Hourglass's Redis CPU per task on one
// redis-server next to the cluster's.
func compareStandalone(r *report) {
	c := r.find("cluster")
	if c == nil {
		return
	}
	var parts []string
	for _, ph := range []string{"burst", "steady"} {
		s := r.find(ph)
		if s == nil {
			continue
		}
		one, ok1 := s.get("hourglass", "rcpu_per_1k")
		all, ok2 := c.get(ph, "rcpu_per_1k")
		if !ok1 || !ok2 {
			continue
		}
		var hi float64
		for _, n := range nodeRowsOf(c, ph) {
			hi = max(hi, n.M["rcpu_per_1k"])
		}
		p := fmt.Sprintf("%s: Redis CPU %.1f µs/task on one redis-server, %.1f on the cluster's nodes together (%.2f×), %.1f on the busiest node", ph, one, all, all/one, hi)
		alone := func(k string) float64 { v, _ := s.get("hourglass", k); return v }
		clus := func(k string) float64 { v, _ := c.get(ph, k); return v }
		if ph == "burst" {
			if hi > 0 {
				p += fmt.Sprintf(" (at one core each: %.0f tasks/s against %.0f)", 1e6/hi, 1e6/one)
			}
			p += fmt.Sprintf("; schedulers and bench %.1f against %.1f CPU µs/task; drain %.0f against %.0f tasks/s",
				alone("ocpu_per_1k"), clus("ocpu_per_1k"), alone("drain"), clus("drain"))
		} else {
			p += fmt.Sprintf("; round trips %.2f against %.2f per task; lateness p50/p99 %.1f/%.1f against %.1f/%.1f ms",
				alone("reads"), clus("reads"), alone("p50"), alone("p99"), clus("p50"), clus("p99"))
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		c.Notes = append(c.Notes, "run with -scenarios burst,steady,cluster to compare with one redis-server in the same run")
		return
	}
	c.Notes = append(c.Notes, "against the burst and steady scenarios of this run (16 shards on one redis-server), one redis-server first — "+strings.Join(parts, " — "))
}
