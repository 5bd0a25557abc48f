package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// cmdCounter is a go-redis hook counting the top-level commands a client
// sends (pipelined ones included), by Redis's command name. Every client
// the bench process creates carries one, so top-level calls are known
// exactly; Redis's INFO commandstats also counts the commands scripts run.
type cmdCounter struct {
	mu sync.Mutex
	n  map[string]int64
}

func newCmdCounter() *cmdCounter { return &cmdCounter{n: map[string]int64{}} }

func (c *cmdCounter) add(cmds ...redis.Cmder) {
	c.mu.Lock()
	for _, cmd := range cmds {
		c.n[strings.ToLower(cmd.Name())]++
	}
	c.mu.Unlock()
}

func (c *cmdCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *cmdCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.add(cmd)
		return next(ctx, cmd)
	}
}
func (c *cmdCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.add(cmds...)
		return next(ctx, cmds)
	}
}

func (c *cmdCounter) snap() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.n))
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

// counters groups the hooks of one system's clients in the bench process.
type counters []*cmdCounter

func (cs counters) snap() map[string]int64 {
	out := map[string]int64{}
	for _, c := range cs {
		for k, v := range c.snap() {
			out[k] += v
		}
	}
	return out
}

// rstats is one snapshot of a Redis server's counters.
type rstats struct {
	at     time.Time
	calls  map[string]int64 // INFO commandstats calls, by command ("config|get")
	usec   map[string]int64 // INFO commandstats usec, by command
	cpu    float64          // used_cpu_user + used_cpu_sys, seconds
	cpuSys float64          // used_cpu_sys, seconds
	mem    int64            // used_memory
	reads  int64            // total_reads_processed: socket reads, about one per round trip
	wakes  int64            // redis-server's voluntary context switches: sleeps in epoll_wait, each ended by a wake-up
	// processed is total_commands_processed (INFO stats): every command
	// Redis ran, those run inside scripts included (as commandstats).
	processed int64
	bench     map[string]int64 // top-level commands sent by the bench's own clients of the system
	admin     map[string]int64 // commands sent by the measuring client (subtracted)
	procs     map[int]float64  // CPU seconds of other processes by pid (schedulers, this process)
	pids      []int
	pidCPU    float64
	// nodes are the per-node snapshots of a Redis Cluster, in the env's
	// node order; the fields above are their sums.
	nodes []rstats
}

// snapshot reads INFO commandstats/cpu/memory through admin and the hooks.
func snapshot(ctx context.Context, admin redis.Cmdable, adminN *cmdCounter, bench counters, pids []int) (rstats, error) {
	s := rstats{at: time.Now(), calls: map[string]int64{}, usec: map[string]int64{}, procs: map[int]float64{}, pids: pids}
	s.admin = adminN.snap() // before INFO, so INFO itself falls in the next window
	s.bench = bench.snap()
	txt, err := admin.Info(ctx, "commandstats", "cpu", "memory", "stats", "server").Result()
	if err != nil {
		return s, err
	}
	var cpuU, cpuS float64
	for _, line := range strings.Split(txt, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "cmdstat_"):
			name, rest, _ := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
			for _, f := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(f, "calls="); ok {
					s.calls[name], _ = strconv.ParseInt(v, 10, 64)
				}
				if v, ok := strings.CutPrefix(f, "usec="); ok {
					s.usec[name], _ = strconv.ParseInt(v, 10, 64)
				}
			}
		case strings.HasPrefix(line, "used_cpu_user:"):
			cpuU, _ = strconv.ParseFloat(strings.TrimPrefix(line, "used_cpu_user:"), 64)
		case strings.HasPrefix(line, "used_cpu_sys:"):
			cpuS, _ = strconv.ParseFloat(strings.TrimPrefix(line, "used_cpu_sys:"), 64)
		case strings.HasPrefix(line, "process_id:"):
			pid, _ := strconv.Atoi(strings.TrimPrefix(line, "process_id:"))
			s.wakes = voluntarySwitches(pid)
		case strings.HasPrefix(line, "total_reads_processed:"):
			s.reads, _ = strconv.ParseInt(strings.TrimPrefix(line, "total_reads_processed:"), 10, 64)
		case strings.HasPrefix(line, "total_commands_processed:"):
			s.processed, _ = strconv.ParseInt(strings.TrimPrefix(line, "total_commands_processed:"), 10, 64)
		case strings.HasPrefix(line, "used_memory:"):
			s.mem, _ = strconv.ParseInt(strings.TrimPrefix(line, "used_memory:"), 10, 64)
		}
	}
	s.cpu = cpuU + cpuS
	s.cpuSys = cpuS
	for _, pid := range pids {
		s.procs[pid] = procCPU(pid)
	}
	s.pidCPU = procCPU(os.Getpid())
	return s, nil
}

// sumStats adds up the snapshots of a cluster's nodes (taken one after
// the other, through plain clients without bench counters or pids); the
// result keeps them in nodes. The caller sets bench, procs, pids and
// pidCPU.
func sumStats(nodes []rstats) rstats {
	s := rstats{calls: map[string]int64{}, usec: map[string]int64{}, admin: map[string]int64{}, procs: map[int]float64{}, nodes: nodes}
	for _, n := range nodes {
		if n.at.After(s.at) {
			s.at = n.at
		}
		for k, v := range n.calls {
			s.calls[k] += v
		}
		for k, v := range n.usec {
			s.usec[k] += v
		}
		for k, v := range n.admin {
			s.admin[k] += v
		}
		s.cpu += n.cpu
		s.cpuSys += n.cpuSys
		s.mem += n.mem
		s.reads += n.reads
		s.wakes += n.wakes
		s.processed += n.processed
	}
	return s
}

// window is the difference between two snapshots.
type window struct {
	secs     float64
	total    int64            // every command Redis ran, minus the measuring client's
	topLevel int64            // commands clients sent (scripts count as one)
	inScript int64            // commands run inside scripts
	byCmd    map[string]int64 // total by command name
	usec     map[string]int64 // Redis time by command (a script's includes its commands')
	cpu      float64          // redis-server CPU seconds
	cpuSys   float64          // of which in the kernel (system time)
	memDelta int64
	wakes    int64 // times redis-server slept and was woken
	// processed is total_commands_processed minus the measuring
	// client's commands: the same count as total, read from INFO stats.
	processed int64
	reads     int64    // socket reads Redis processed (round trips), the measuring client's INFO calls included
	procCPU   float64  // CPU seconds of the scheduler processes
	selfCPU   float64  // CPU seconds of the bench process
	nodes     []window // per node of a Redis Cluster, in the env's node order
}

// diff computes b-a. Top-level calls are the bench clients' (exact, from
// the hooks) plus EVALSHA/EVAL calls nobody in this process sent (the
// scheduler processes' mover and recovery scripts); the scheduler
// processes' few other top-level commands (SSUBSCRIBE at start) are
// counted as script-internal, a negligible error.
func diff(a, b rstats) window {
	w := window{secs: b.at.Sub(a.at).Seconds(), byCmd: map[string]int64{}, usec: map[string]int64{}}
	for k, v := range b.usec {
		if d := v - a.usec[k]; d > 0 && !adminOnly[k] {
			w.usec[k] = d
		}
	}
	for k, v := range b.calls {
		d := v - a.calls[k]
		d -= b.admin[k] - a.admin[k]
		if d > 0 {
			w.byCmd[k] = d
			w.total += d
		}
	}
	var benchTotal, benchEval int64
	for k, v := range b.bench {
		d := v - a.bench[k]
		benchTotal += d
		if k == "evalsha" || k == "eval" {
			benchEval += d
		}
	}
	others := w.byCmd["evalsha"] + w.byCmd["eval"] - benchEval
	w.topLevel = benchTotal + max(others, 0)
	w.inScript = max(w.total-w.topLevel, 0)
	w.cpu = b.cpu - a.cpu
	w.cpuSys = b.cpuSys - a.cpuSys
	w.memDelta = b.mem - a.mem
	w.reads = b.reads - a.reads
	w.wakes = b.wakes - a.wakes
	for pid, v := range b.procs {
		w.procCPU += v - a.procs[pid]
	}
	w.selfCPU = b.pidCPU - a.pidCPU
	var adminN int64
	for k, v := range b.admin {
		adminN += v - a.admin[k]
	}
	w.processed = b.processed - a.processed - adminN
	if len(a.nodes) == len(b.nodes) {
		for i := range b.nodes {
			w.nodes = append(w.nodes, diff(a.nodes[i], b.nodes[i]))
		}
	}
	return w
}

// adminOnly are commands only the measuring client sends.
var adminOnly = map[string]bool{"info": true, "zcard": true, "llen": true, "memory|usage": true}

// usecPerTask renders Redis time per task: scripts (EVALSHA, its own
// commands included), the script overhead (EVALSHA minus the commands
// scripts ran) and the costliest commands.
func (w window) usecPerTask(n int64, inScript map[string]bool) string {
	if n <= 0 {
		return ""
	}
	var inner int64
	type kv struct {
		k string
		v int64
	}
	var l []kv
	for k, v := range w.usec {
		if inScript[k] {
			inner += v
		}
		if k != "evalsha" && k != "eval" {
			l = append(l, kv{k, v})
		}
	}
	sort.Slice(l, func(i, j int) bool { return l[i].v > l[j].v })
	ev := w.usec["evalsha"] + w.usec["eval"]
	parts := []string{fmt.Sprintf("EVALSHA %.2f µs (of which Lua/call overhead %.2f)", float64(ev)/float64(n), float64(ev-inner)/float64(n))}
	for i, e := range l {
		if i >= 6 {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.2f", e.k, float64(e.v)/float64(n)))
	}
	return "Redis µs/task (commandstats): " + strings.Join(parts, ", ")
}

// topCmds renders the commands with the most calls, per task when n > 0.
func (w window) topCmds(k int, n int64) string {
	type kv struct {
		k string
		v int64
	}
	var l []kv
	for c, v := range w.byCmd {
		l = append(l, kv{c, v})
	}
	sort.Slice(l, func(i, j int) bool { return l[i].v > l[j].v || (l[i].v == l[j].v && l[i].k < l[j].k) })
	var parts []string
	for i, e := range l {
		if i >= k {
			break
		}
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s %.2f", e.k, float64(e.v)/float64(n)))
		} else {
			parts = append(parts, fmt.Sprintf("%s %d", e.k, e.v))
		}
	}
	return strings.Join(parts, ", ")
}

// voluntarySwitches reads a local process's voluntary context switches
// (0 if it cannot).
func voluntarySwitches(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// procCPU returns utime+stime of a process in seconds, 0 if it is gone.
func procCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ is 100 on Linux
}

// redisVersion asks a server for its version.
func redisVersion(ctx context.Context, c redis.Cmdable) string {
	txt, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "?"
	}
	sc := bufio.NewScanner(strings.NewReader(txt))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "redis_version:"); ok {
			return v
		}
	}
	return "?"
}

func hostPort(addr string) (string, string) {
	h, p, _ := net.SplitHostPort(addr)
	return h, p
}
