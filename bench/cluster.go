package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/connect"
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
		r.note("node %d: commands (the most called): %s", i+1, nw.topCmds(6, 0))
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
