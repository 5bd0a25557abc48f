package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// idleWindow is the full run's idle window for Hourglass: the
// smallest common multiple of its periodic checks on an idle
// deployment — the workers' blocking fetch (worker.fetch_timeout, 30
// s), the health checks of idle pub/sub connections (1 min), the
// schedulers' registry check and layout re-read (1 min), the movers' and
// idle recovery loops' re-check (scheduler.idle_recheck, 5 min) and the
// workers' registration check (5 min) — so that every check is counted
// at its average rate whatever its phase.
const idleWindow = 5 * time.Minute

// idleConsumers is how many workers (consumers) run during the idle
// window: two, as a deployment with two schedulers has.
const idleConsumers = 2

// ---- 4. Idle ----

// runIdle stores o.idleN future tasks in each system, then counts what
// Redis runs while two consumers (and Hourglass's two schedulers) wait.
// peers are asynq's configurations (which share one fill) and BullMQ.
func runIdle(ctx context.Context, o sizes, hg *hgSystem, peers []system, logf func(string, ...any)) *scenario {
	sc := &scenario{Name: "idle", Title: fmt.Sprintf("Idle: %d future tasks (due in 1–2 h, 100-byte payloads), %d workers (and Hourglass's 2 schedulers) running; window %s for Hourglass, %s for the others", o.idleN, idleConsumers, o.idleWin, o.peerIdleWin),
		Cols: []col{{"cps", "redis cmds/s", "%.1f"}, {"tps", "top-level calls/s", "%.1f"}, {"cpu", "redis CPU s", "%.3f"}, {"mem", "bytes/task beyond payload", "%.0f"}, {"enq", "enqueue/s (8 goroutines)", "%.0f"}}}
	sc.Notes = append(sc.Notes, "memory = (used_memory after enqueue − before) / tasks − 100; commands from INFO commandstats over the window (minus the benchmark's own INFO calls); top-level = calls clients sent (a script call counts once), the rest ran inside scripts")
	fill := func(sys system, r *row) bool {
		_ = sys.clear(ctx)
		sys.setPrefix(uniq("idle"))
		time.Sleep(500 * time.Millisecond)
		before, err := sys.snap(ctx)
		if err != nil {
			r.note("%v", err)
			return false
		}
		base := time.Now().Add(time.Hour)
		ts := make([]btask, o.idleN)
		for i := range ts {
			ts[i] = btask{idx: i, due: base.Add(time.Duration(rand.Int64N(int64(time.Hour)))).Truncate(time.Millisecond), payload: 100}
		}
		t0 := time.Now()
		sent, err := enqueueAll(ctx, sys.enqueue, ts, 8, chunkFor(sys), time.Time{})
		r.set("enq", float64(sent)/time.Since(t0).Seconds())
		if err != nil {
			r.note("enqueue: %v", err)
		}
		time.Sleep(2 * time.Second) // movers see the new earliest tasks and go back to sleep
		after, _ := sys.snap(ctx)
		r.set("mem", float64(after.mem-before.mem)/float64(sent)-100)
		if hgs, ok := sys.(*hgSystem); ok {
			r.note("%s", hgs.memBreakdown(ctx))
		}
		logf("idle %s: %d tasks stored, %.0f bytes/task beyond the payload", sys.name(), sent, r.M["mem"])
		return sent == o.idleN
	}
	measure := func(sys system, r *row, win time.Duration) {
		rec := newRecorder(1)
		var stops []func()
		defer func() {
			for _, stop := range stops {
				stop()
			}
		}()
		for range idleConsumers {
			stop, err := sys.startConsumer(ctx, rec)
			if err != nil {
				r.note("consumer: %v", err)
				return
			}
			stops = append(stops, stop)
		}
		time.Sleep(3 * time.Second)
		a, _ := sys.snap(ctx)
		time.Sleep(win)
		b, _ := sys.snap(ctx)
		w := diff(a, b)
		r.set("cps", float64(w.total)/w.secs)
		r.set("tps", float64(w.topLevel)/w.secs)
		r.set("cpu", w.cpu)
		dropUnknown(sys, r)
		r.note("commands in the window: %s", w.topCmds(10, 0))
		logf("idle %s: %.1f commands/s (%.1f top-level), redis CPU %.3f s", sys.name(), r.M["cps"], r.M["tps"], w.cpu)
	}
	r := sc.row(hg.name())
	fill(hg, r)
	measure(hg, r, o.idleWin)
	r.note("the window (%s in a full run) is a common multiple of every periodic check of an idle deployment: the workers' blocking fetch (30 s), the PINGs on idle pub/sub connections (1 min), the schedulers' registry check and layout re-read (1 min), the movers' and idle recovery loops' re-check (scheduler.idle_recheck, 5 min) and the workers' registration check (5 min); a shorter window reads 0 or a burst depending on its phase", idleWindow)
	_ = hg.clear(ctx)
	var first *row // asynq's configurations share the first one's fill
	for _, sys := range peers {
		ri := sc.row(sys.name())
		_, isAQ := sys.(*aqSystem)
		if isAQ && first != nil {
			ri.set("mem", first.M["mem"])
			ri.set("enq", first.M["enq"])
			ri.note("same stored tasks as %s", first.System)
		} else {
			fill(sys, ri)
		}
		measure(sys, ri, o.peerIdleWin)
		if isAQ && first == nil {
			first = ri
		}
		if !isAQ {
			_ = sys.clear(ctx)
		}
	}
	if first != nil {
		for _, sys := range peers {
			if _, ok := sys.(*aqSystem); ok {
				_ = sys.clear(ctx)
				break
			}
		}
	}
	return sc
}

// memBreakdown reports MEMORY USAGE of shard 0's task hash, delayed set
// and far tier (its bucket index and lists) per task.
func (h *hgSystem) memBreakdown(ctx context.Context) string {
	l, c := h.e.layout, h.e.hgAdmin
	n, _ := c.HLen(ctx, l.Tasks(0)).Result()
	if n == 0 {
		return "shard 0 empty"
	}
	tm, _ := c.MemoryUsage(ctx, l.Tasks(0), 0).Result()
	zm, _ := c.MemoryUsage(ctx, l.Delayed(0), 0).Result()
	zn, _ := c.ZCard(ctx, l.Delayed(0)).Result()
	fm, _ := c.MemoryUsage(ctx, l.Far(0), 0).Result()
	buckets, _ := c.ZRange(ctx, l.Far(0), 0, -1).Result()
	var lm, ln int64
	for _, b := range buckets {
		m, _ := c.MemoryUsage(ctx, l.FarBucket(0, b), 0).Result()
		k, _ := c.LLen(ctx, l.FarBucket(0, b)).Result()
		lm, ln = lm+m, ln+k
	}
	var blob string
	if ids, _ := c.HRandField(ctx, l.Tasks(0), 1).Result(); len(ids) > 0 {
		blob, _ = c.HGet(ctx, l.Tasks(0), ids[0]).Result()
		blob = fmt.Sprintf("; a task id is %d bytes, its encoded value %d bytes (%d + payload)", len(ids[0]), len(blob), len(blob)-100)
	}
	per := func(m, k int64) float64 { return float64(m) / float64(max(k, 1)) }
	return fmt.Sprintf("MEMORY USAGE of shard 0 (%d tasks): tasks hash %.0f bytes/task; delayed zset %d members, %.0f bytes each; far tier %d entries in %d buckets, %.1f bytes per entry (lists) + %.1f (bucket index)%s",
		n, per(tm, n), zn, per(zm, zn), ln, len(buckets), per(lm, ln), per(fm, ln), blob)
}
