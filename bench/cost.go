package main

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/shard"
)

// runCost measures Redis commands per task, stage by stage for Hourglass,
// end-to-end throughput under saturation for every system, and a
// redis-benchmark ceiling on the same Redis build.
func runCost(ctx context.Context, o sizes, hg *hgSystem, systems []system, logf func(string, ...any)) (*scenario, *scenario) {
	st := &scenario{Name: "stages", Title: fmt.Sprintf("Cost per task, Hourglass stage by stage (%d tasks, 16-byte payloads)", o.costN),
		Cols: []col{{"cmds", "redis cmds/task", "%.2f"}, {"top", "top-level calls/task", "%.3f"}, {"rcpu_per_1k", "redis CPU µs/task", "%.1f"}, {"rate", "tasks/s", "%.0f"}}}
	st.Notes = append(st.Notes, "commandstats counts calls: a variadic command (ZADD of 500 members, HDEL of 200 fields) counts once however much it does, so Redis CPU µs/task is the better measure of cost once scripts batch; Lua/call overhead = EVALSHA time minus the time of the commands the scripts ran (argument passing, Lua code such as decoding and string formatting, building the reply)")
	st.Notes = append(st.Notes, "stages run one after the other: enqueue (1 goroutine, EnqueueBatch of 1000), move (the schedulers' movers; no worker running), deliver (in-process worker: BLMPOP fetch + handler + ack.lua; no lease for a no-op handler)")
	if hg != nil {
		costStages(ctx, o, hg, st, logf)
		if note, err := scriptCosts(ctx, hg, 5000); err != nil {
			st.Notes = append(st.Notes, "script costs: "+err.Error())
		} else {
			st.Notes = append(st.Notes, note)
			logf("%s", note)
		}
	}
	sat := &scenario{Name: "cost", Title: fmt.Sprintf("Cost per task end to end: %d tasks pushed through as fast as they go (each due 100 ms after it is produced)", o.satN),
		Cols: []col{{"tput", "tasks/s end to end", "%.0f"}, {"enq", "enqueue/s meanwhile", "%.0f"}, {"cmds", "redis cmds/task", "%.1f"}, {"top", "top-level/task", "%.2f"}, {"rcpu_per_1k", "redis CPU µs/task", "%.1f"},
			{"rutil", "redis CPU %", "%.0f"}, {"outil", "sched+bench CPU %", "%.0f"}, {"cps", "redis cmds/s", "%.0f"},
			{"frac", "of ceiling %", "%.1f"}, {"p50", "late p50 ms", "%.0f"}, {"p99", "late p99 ms", "%.0f"}}}
	sat.Notes = append(sat.Notes, "producers enqueue without pause while the consumer runs (Hourglass: 1 goroutine, EnqueueBatch of 1000; asynq: 8 goroutines × EnqueueContext); tasks/s end to end = tasks / (last handler start − first enqueue); CPU % is of one core over the run (the machine's 2 cores are shared by Redis, the schedulers and the bench process); lateness = handler start − due")
	for _, sys := range systems {
		saturate(ctx, o, sys, sat.row(sys.name()), logf)
	}
	ceil := ceiling(ctx, o, hg, logf)
	if ceil.ops > 0 {
		for i := range sat.Rows {
			r := &sat.Rows[i]
			if c, ok := r.M["cps"]; ok {
				r.set("frac", 100*c/ceil.ops)
			}
		}
		sat.Notes = append(sat.Notes, fmt.Sprintf("ceiling: redis-benchmark -P 16 on the same Redis build: %s; median of the plain commands %.0f ops/s = the ceiling; 'of ceiling' = the system's Redis commands/s end to end ÷ that (for Hourglass, ceiling ÷ cmds/task = %.0f tasks/s)",
			ceil.detail, ceil.ops, ceil.ops/max(sat.Rows[0].M["cmds"], 1)))
		if ceil.enqScript > 0 {
			sat.Notes = append(sat.Notes, fmt.Sprintf("redis-benchmark -P 16 calling enqueue.lua itself (EVALSHA, random ids, shard 0): %.0f tasks/s with one task per call, %.0f tasks/s with 16 tasks per call — what Redis can execute, whatever the client", ceil.enqScript, ceil.enqScript16))
		}
	}
	return st, sat
}

func costStages(ctx context.Context, o sizes, hg *hgSystem, sc *scenario, logf func(string, ...any)) {
	_ = hg.clear(ctx)
	hg.setPrefix(uniq("cost"))
	n := o.costN
	due := time.Now().Add(3 * time.Second).Truncate(time.Millisecond)
	ts := make([]btask, n)
	for i := range ts {
		ts[i] = btask{idx: i, due: due, payload: 16}
	}
	a, _ := hg.snap(ctx)
	t0 := time.Now()
	sent, err := enqueueAll(ctx, hg.enqueue, ts, 1, 1000, time.Time{})
	enqDur := time.Since(t0)
	b, _ := hg.snap(ctx)
	if err != nil || sent != n {
		sc.Notes = append(sc.Notes, fmt.Sprintf("enqueue: %d of %d: %v", sent, n, err))
	}
	if time.Now().After(due) {
		sc.Notes = append(sc.Notes, "enqueue ended after the due time: the move stage overlaps it")
	}
	// Wait for the movers: every delayed set empty, every task ready.
	var moveEnd time.Time
	for deadline := due.Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		pipe := hg.e.hgAdmin.Pipeline()
		var zs, ls []*redis.IntCmd
		for sh := 0; sh < hg.e.shards; sh++ {
			zs = append(zs, pipe.ZCard(ctx, hg.e.layout.Delayed(sh)))
			ls = append(ls, pipe.LLen(ctx, hg.e.layout.Ready(sh, hgQueue)))
		}
		_, _ = pipe.Exec(ctx)
		var z, l int64
		for i := range zs {
			z += zs[i].Val()
			l += ls[i].Val()
		}
		if z == 0 && l == int64(sent) {
			moveEnd = time.Now()
			break
		}
	}
	c, _ := hg.snap(ctx)
	inScript := scriptCommands(hg.e.root)
	rec := newRecorder(n)
	t1 := time.Now()
	stop, err := hg.startConsumer(ctx, rec)
	if err != nil {
		sc.Notes = append(sc.Notes, err.Error())
		return
	}
	rec.wait(ctx, sent, time.Now().Add(60*time.Second))
	for deadline := time.Now().Add(10 * time.Second); hg.acks() < float64(sent) && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	delDur := time.Since(t1)
	d, _ := hg.snap(ctx)
	stop()
	stage := func(name string, w window, secs float64) {
		r := sc.row(name)
		putCost(r, w, sent)
		if secs > 0 {
			r.set("rate", float64(sent)/secs)
		}
		r.note("per task: %s", w.topCmds(12, int64(sent)))
		r.note("%s", w.usecPerTask(int64(sent), inScript))
	}
	stage("enqueue", diff(a, b), enqDur.Seconds())
	mv := diff(b, c)
	var moveSecs float64
	if !moveEnd.IsZero() {
		moveSecs = moveEnd.Sub(due).Seconds()
	}
	stage("move", mv, moveSecs)
	stage("deliver (fetch+ack)", diff(c, d), delDur.Seconds())
	tot := diff(a, d)
	r := sc.row("total enqueue → ack")
	putCost(r, tot, sent)
	r.note("per task: %s", tot.topCmds(16, int64(sent)))
	r.note("%s", tot.usecPerTask(int64(sent), inScript))
	logf("cost stages: enqueue %.2f, move %.2f, deliver %.2f, total %.2f redis commands/task", float64(diff(a, b).total)/float64(sent), float64(mv.total)/float64(sent), float64(diff(c, d).total)/float64(sent), float64(tot.total)/float64(sent))
	_ = hg.clear(ctx)
}

// saturate pushes n tasks through a system as fast as it goes: producers
// enqueue without pause (each task due 100 ms after it is produced) while
// the consumer runs; throughput = n / (last handler start − first enqueue).
func saturate(ctx context.Context, o sizes, sys system, r *row, logf func(string, ...any)) {
	_ = sys.clear(ctx)
	sys.setPrefix(uniq("sat"))
	n := o.satN
	rec := newRecorder(n)
	stop, err := sys.startConsumer(ctx, rec)
	if err != nil {
		r.note("consumer: %v", err)
		return
	}
	defer stop()
	g, chunk := 8, 50
	if _, ok := sys.(*hgSystem); ok {
		g, chunk = 1, 1000
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	var errOnce sync.Once
	a, _ := sys.snap(ctx)
	t0 := time.Now()
	for range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				hi := int(next.Add(int64(chunk)))
				lo := hi - chunk
				if lo >= n {
					return
				}
				hi = min(hi, n)
				due := time.Now().Add(100 * time.Millisecond).Truncate(time.Millisecond)
				ts := make([]btask, hi-lo)
				for i := range ts {
					ts[i] = btask{idx: lo + i, due: due, payload: 16}
				}
				if _, err := sys.enqueue(ctx, ts); err != nil {
					errOnce.Do(func() { r.note("enqueue: %v", err) })
				}
			}
		}()
	}
	wg.Wait()
	enqDur := time.Since(t0)
	if !rec.wait(ctx, n, time.Now().Add(60*time.Second)) {
		r.note("only %d of %d handled within 60 s", rec.distinct(), n)
	}
	b, _ := sys.snap(ctx)
	w := diff(a, b)
	s := rec.summarize(nil)
	el := float64(s.LastStart-t0.UnixNano()) / 1e9
	r.set("tput", float64(s.Handled)/el)
	r.set("enq", float64(n)/enqDur.Seconds())
	putCost(r, w, s.Handled)
	dropUnknown(sys, r)
	r.set("cps", float64(w.total)/el)
	r.set("rutil", 100*w.cpu/w.secs)
	r.set("outil", 100*(w.procCPU+w.selfCPU)/w.secs)
	r.set("p50", s.P50)
	r.set("p99", s.P99)
	r.note("per task: %s", w.topCmds(12, int64(max(s.Handled, 1))))
	logf("throughput %s: %.0f tasks/s end to end (enqueue %.0f/s), %.1f redis cmds/task, redis CPU %.0f%%, others %.0f%%", sys.name(), r.M["tput"], r.M["enq"], r.M["cmds"], r.M["rutil"], r.M["outil"])
	_ = sys.clear(ctx)
}

type ceilingResult struct {
	ops         float64
	detail      string
	enqScript   float64 // tasks/s, one task per call
	enqScript16 float64 // tasks/s, 16 tasks per call
}

var rpsRE = regexp.MustCompile(`^(.*?):\s+([0-9.]+) requests per second`)

// ceiling runs redis-benchmark (pipelined, 16 deep) against the
// Hourglass Redis in database 9, then against enqueue.lua in database 0.
func ceiling(ctx context.Context, o sizes, hg *hgSystem, logf func(string, ...any)) ceilingResult {
	var res ceilingResult
	if hg == nil {
		return res
	}
	bin, err := exec.LookPath("redis-benchmark")
	if err != nil {
		res.detail = "redis-benchmark not found"
		return res
	}
	host, port := hostPort(hg.e.hgRed.Addr)
	common := []string{"-h", host, "-p", port, "-P", "16", "-q"}
	run := func(extra ...string) map[string]float64 {
		cmd := exec.CommandContext(ctx, bin, append(append([]string{}, common...), extra...)...)
		out, err := cmd.CombinedOutput()
		m := map[string]float64{}
		if err != nil {
			logf("redis-benchmark: %v: %s", err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			// -q prints progress with \r; keep the final part.
			if i := strings.LastIndexByte(line, '\r'); i >= 0 {
				line = line[i+1:]
			}
			if mm := rpsRE.FindStringSubmatch(strings.TrimSpace(line)); mm != nil {
				v, _ := strconv.ParseFloat(mm[2], 64)
				m[mm[1]] = v
			}
		}
		return m
	}
	n := strconv.Itoa(o.benchN)
	plain := run("--dbnum", "9", "-n", n, "-r", "100000", "-t", "set,get,incr,lpush,rpush,lpop,rpop,hset,zadd")
	adm := hg.e.hgAdmin
	sha, _ := adm.ScriptLoad(ctx, "return 1").Result()
	custom := run("--dbnum", "9", "-n", n, "EVALSHA", sha, "0")
	for k, v := range custom {
		plain["EVALSHA return 1"] = v
		_ = k
	}
	var vals []float64
	var parts []string
	keys := make([]string, 0, len(plain))
	for k := range plain {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.0f/s", strings.SplitN(k, " ", 2)[0]+map[bool]string{true: " (script)"}[strings.HasPrefix(k, "EVALSHA")], plain[k]))
		if !strings.HasPrefix(k, "EVALSHA") {
			vals = append(vals, plain[k])
		}
	}
	slices.Sort(vals)
	if len(vals) > 0 {
		res.ops = vals[len(vals)/2]
	}
	res.detail = strings.Join(parts, ", ")
	// Clean database 9.
	c9 := redis.NewClient(&redis.Options{Addr: hg.e.hgRed.Addr, DB: 9})
	_ = c9.FlushDB(ctx).Err()
	c9.Close()
	// enqueue.lua itself, shard 0, random ids, due in an hour: one task
	// per call and 16 per call when the script takes many (its ARGV[1] is
	// then the wake channel).
	l := hg.e.layout
	src := shard.EnqueueScriptSource()
	esha, err := adm.ScriptLoad(ctx, src).Result()
	if err == nil {
		many := strings.Contains(src, "ARGV[1] wake channel")
		task := func(i int) []string {
			return []string{fmt.Sprintf("b%d:__rand_int__", i), "+3600000", hgQueue, "", "", "0123456789abcdef"}
		}
		args := func(k int) []string {
			a := []string{"-n", strconv.Itoa(o.benchN / 2 / k), "-r", "1000000000", "EVALSHA", esha, "3", l.Delayed(0), l.Tasks(0), l.Queues(0)}
			if many {
				a = append(a, l.WakeChannel(0))
				for i := range k {
					a = append(a, task(i)...)
				}
				return a
			}
			return append(append(a, task(0)...), l.WakeChannel(0))
		}
		for _, v := range run(args(1)...) {
			res.enqScript = v
		}
		if many {
			for _, v := range run(args(16)...) {
				res.enqScript16 = 16 * v
			}
		}
		_ = hg.clear(ctx)
	}
	logf("ceiling: %s; enqueue.lua %.0f tasks/s (1 per call), %.0f tasks/s (16 per call)", res.detail, res.enqScript, res.enqScript16)
	return res
}
