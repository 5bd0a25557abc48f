package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/hourglass-sched/hourglass/internal/promread"
)

// sizes are the scenario sizes of a full or a -quick run.
type sizes struct {
	burstN                int
	steadyRate            int
	steadyDur             time.Duration
	enqMax                int
	enqBound              time.Duration
	idleN                 int
	idleWin               time.Duration
	costN                 int
	satN                  int
	failoverAfter         time.Duration // load after each takeover before the next step
	benchN                int
	hgBurstLead, aqBurstL time.Duration
}

func sizesFor(quick bool) sizes {
	if quick {
		return sizes{burstN: 10000, steadyRate: 2000, steadyDur: 5 * time.Second, enqMax: 20000, enqBound: 3 * time.Second,
			idleN: 100000, idleWin: 5 * time.Second, costN: 5000, satN: 10000, failoverAfter: time.Second,
			benchN: 50000, hgBurstLead: 2 * time.Second, aqBurstL: 3 * time.Second}
	}
	return sizes{burstN: 100000, steadyRate: 2000, steadyDur: 20 * time.Second, enqMax: 300000, enqBound: 6 * time.Second,
		idleN: 1000000, idleWin: 30 * time.Second, costN: 50000, satN: 50000, failoverAfter: 2 * time.Second,
		benchN: 200000, hgBurstLead: 4 * time.Second, aqBurstL: 12 * time.Second}
}

// set stores a finite value.
func (r *row) set(k string, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return
	}
	r.M[k] = v
}

func (r *row) note(f string, a ...any) { r.Notes = append(r.Notes, fmt.Sprintf(f, a...)) }

func chunkFor(sys system) int {
	if _, ok := sys.(*hgSystem); ok {
		return 1000
	}
	return 100
}

func uniq(s string) string { return fmt.Sprintf("%s%d", s, time.Now().UnixNano()%1e9) }

func latCols() []col {
	return []col{
		{"p50", "late p50 ms", "%.1f"}, {"p90", "p90 ms", "%.1f"}, {"p99", "p99 ms", "%.1f"}, {"max", "max ms", "%.0f"},
	}
}

func putLat(r *row, s summary) {
	r.set("p50", s.P50)
	r.set("p90", s.P90)
	r.set("p99", s.P99)
	r.set("max", s.Max)
	r.set("absp99", s.AbsP99)
	r.set("lost", float64(s.Lost))
	r.set("dups", float64(s.Dups))
	if s.Early > 0 {
		r.note("%d of %d tasks started before their due time (earliest %.0f ms early): asynq stores due times in whole seconds", s.Early, s.Handled, -s.Min)
	}
}

func putCost(r *row, w window, n int) {
	if n <= 0 {
		return
	}
	r.set("cmds", float64(w.total)/float64(n))
	r.set("top", float64(w.topLevel)/float64(n))
	r.set("reads", float64(w.reads)/float64(n))
	r.set("wakes", float64(w.wakes)/float64(n))
	r.set("rcpu", w.cpu)
	r.set("rcpu_per_1k", 1e6*w.cpu/float64(n)) // µs of Redis CPU per task
	putNodes(r, w, n)
}

// ---- 1. Burst ----

func runBurst(ctx context.Context, o sizes, systems []system, logf func(string, ...any)) *scenario {
	sc := &scenario{Name: "burst", Title: fmt.Sprintf("Burst: %d tasks due at the same instant, no-op handlers (concurrency %d)", o.burstN, concurrency),
		Cols: append([]col{{"enq", "enqueue/s", "%.0f"}, {"drain", "drain/s", "%.0f"}}, append(latCols(),
			col{"lost", "lost", "%.0f"}, col{"dups", "dups", "%.0f"}, col{"cmds", "redis cmds/task", "%.1f"},
			col{"top", "top-level/task", "%.2f"}, col{"rcpu_per_1k", "redis CPU µs/task", "%.0f"}, col{"ocpu_per_1k", "sched+bench CPU µs/task", "%.0f"})...)}
	sc.Notes = append(sc.Notes, "enqueue from 8 goroutines (Hourglass: EnqueueBatch of 1000 per round trip; asynq: one EnqueueContext per task, its client has no batch API); due = a whole second after the enqueue ends; drain = tasks / (last handler start − due); lateness = handler start − due")
	for _, sys := range systems {
		r := sc.row(sys.name())
		sys.setPrefix(uniq("burst"))
		rec := newRecorder(o.burstN)
		stop, err := sys.startConsumer(ctx, rec)
		if err != nil {
			r.note("consumer: %v", err)
			continue
		}
		lead := o.hgBurstLead
		if _, ok := sys.(*hgSystem); !ok {
			lead = o.aqBurstL
		}
		due := time.Now().Add(lead).Truncate(time.Second).Add(time.Second)
		ts := make([]btask, o.burstN)
		for i := range ts {
			ts[i] = btask{idx: i, due: due, payload: 16}
		}
		t0 := time.Now()
		sent, err := enqueueAll(ctx, sys, ts, 8, chunkFor(sys), time.Time{})
		encDur := time.Since(t0)
		if err != nil {
			r.note("enqueue: %v", err)
		}
		r.set("enq", float64(sent)/encDur.Seconds())
		if late := time.Since(due); late > 0 {
			r.note("enqueue ended %s after the due time; drain is understated", late.Round(time.Millisecond))
		}
		a, _ := sys.snap(ctx)
		if !rec.wait(ctx, sent, due.Add(90*time.Second)) {
			r.note("only %d of %d handled within 90 s of due", rec.distinct(), sent)
		}
		b, _ := sys.snap(ctx)
		w := diff(a, b)
		s := rec.summarize(nil)
		if s.LastStart > 0 {
			r.set("drain", float64(s.Handled)/(float64(s.LastStart-due.UnixNano())/1e9))
		}
		putLat(r, s)
		putCost(r, w, s.Handled)
		r.set("ocpu_per_1k", 1e6*(w.procCPU+w.selfCPU)/float64(max(s.Handled, 1)))
		if p50, p99, ok := sys.consumerLateness(); ok {
			r.note("worker metric hourglass_worker_lateness_seconds (worker clock: pop − due, or start − due for a task held until due): p50 %.1f ms, p99 %.1f ms", 1000*p50, 1000*p99)
		}
		r.note("Redis commands per task: %s", w.topCmds(8, int64(max(s.Handled, 1))))
		logf("burst %s: enqueue %.0f/s drain %.0f/s p50 %.1f ms p99 %.1f ms max %.0f ms", sys.name(), r.M["enq"], r.M["drain"], s.P50, s.P99, s.Max)
		stop()
		if err := sys.clear(ctx); err != nil {
			r.note("clear: %v", err)
		}
	}
	return sc
}

// ---- 2. Steady ----

var steadyTick = flag.Duration("tick", time.Millisecond, "producer tick of the steady and failover scenarios: each tick's tasks are enqueued together and share a due time")

// produce enqueues rate tasks/s with the given delay until n were
// produced or stop is closed, from senders goroutines; due is set when a
// task is produced. It returns how many it produced.
func produce(ctx context.Context, stop <-chan struct{}, sys system, rate, n int, delay time.Duration, payload, senders int, onErr func(error)) int {
	ch := make(chan []btask, 1024)
	var wg sync.WaitGroup
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ts := range ch {
				if _, err := sys.enqueue(ctx, ts); err != nil && ctx.Err() == nil {
					onErr(err)
				}
			}
		}()
	}
	start := time.Now()
	tick := time.NewTicker(*steadyTick)
	defer tick.Stop()
	sent := 0
	for sent < n && ctx.Err() == nil {
		select {
		case <-tick.C:
		case <-stop:
			n = sent
			continue
		}
		want := min(n, int(float64(rate)*time.Since(start).Seconds()))
		if want <= sent {
			continue
		}
		due := time.Now().Add(delay).Truncate(time.Millisecond)
		// asynq sends one call per task: spread a tick's tasks over the senders.
		step := want - sent
		if senders > 1 {
			step = max(1, step/senders)
		}
		for lo := sent; lo < want; lo += step {
			hi := min(lo+step, want)
			ts := make([]btask, 0, hi-lo)
			for i := lo; i < hi; i++ {
				ts = append(ts, btask{idx: i, due: due, payload: payload})
			}
			ch <- ts
		}
		sent = want
	}
	close(ch)
	wg.Wait()
	return sent
}

func senders(sys system) int {
	if _, ok := sys.(*hgSystem); ok {
		return 1
	}
	return 8
}

func runSteady(ctx context.Context, o sizes, systems []system, logf func(string, ...any)) *scenario {
	n := int(float64(o.steadyRate) * o.steadyDur.Seconds())
	sc := &scenario{Name: "steady", Title: fmt.Sprintf("Steady: %d tasks/s for %s, each due 1 s after it is produced", o.steadyRate, o.steadyDur),
		Cols: append(latCols(), col{"absp99", "|late| p99 ms", "%.1f"}, col{"lost", "lost", "%.0f"}, col{"dups", "dups", "%.0f"},
			col{"cmds", "redis cmds/task", "%.1f"}, col{"top", "top-level/task", "%.2f"}, col{"reads", "round trips/task", "%.2f"}, col{"wakes", "redis wake-ups/task", "%.2f"}, col{"rcpu_per_1k", "redis CPU µs/task", "%.1f"})}
	sc.Notes = append(sc.Notes, fmt.Sprintf("lost = never handled within 10 s after the last due time; the producer ticks every %s (flag -tick): Hourglass enqueues each tick's tasks in one EnqueueBatch, asynq spreads them over 8 goroutines", *steadyTick))
	for _, sys := range systems {
		r := sc.row(sys.name())
		sys.setPrefix(uniq("steady"))
		rec := newRecorder(n)
		stop, err := sys.startConsumer(ctx, rec)
		if err != nil {
			r.note("consumer: %v", err)
			continue
		}
		time.Sleep(500 * time.Millisecond)
		var mv0 promread.Histogram
		hgs, isHG := sys.(*hgSystem)
		if isHG {
			mv0, _ = hgs.moveLateness(ctx)
		}
		a, _ := sys.snap(ctx)
		var errOnce sync.Once
		produce(ctx, nil, sys, o.steadyRate, n, time.Second, 16, senders(sys), func(err error) {
			errOnce.Do(func() { r.note("enqueue: %v", err) })
		})
		rec.wait(ctx, n, time.Now().Add(time.Second+10*time.Second))
		b, _ := sys.snap(ctx)
		s := rec.summarize(nil)
		putLat(r, s)
		w := diff(a, b)
		putCost(r, w, s.Handled)
		r.note("per task: %s", w.topCmds(12, int64(max(s.Handled, 1))))
		r.note("Redis CPU: %.0f%% of it system time (the kernel: sockets, epoll)", 100*w.cpuSys/max(w.cpu, 1e-9))
		if isHG {
			r.note("%s", w.usecPerTask(int64(max(s.Handled, 1)), scriptCommands(hgs.e.root)))
		}
		if p50, p99, ok := sys.consumerLateness(); ok {
			r.note("worker metric (worker clock: pop − due, or start − due for a task held until due): p50 %.1f ms, p99 %.1f ms", 1000*p50, 1000*p99)
		}
		if isHG {
			if h, err := hgs.moveLateness(ctx); err == nil && h.Count > 0 {
				h = h.Sub(mv0)
				r.note("scheduler metric hourglass_move_lateness_seconds (Redis time at move − due, ms resolution, bucketed; moved ahead counts 0): p50 %.1f ms, p99 %.1f ms", 1000*h.Quantile(0.5), 1000*h.Quantile(0.99))
			}
		}
		logf("steady %s: p50 %.1f p90 %.1f p99 %.1f max %.0f ms, lost %d dups %d", sys.name(), s.P50, s.P90, s.P99, s.Max, s.Lost, s.Dups)
		stop()
		_ = sys.clear(ctx)
	}
	return sc
}

// ---- 3. Enqueue ----

func runEnqueue(ctx context.Context, o sizes, systems []system, logf func(string, ...any)) *scenario {
	sc := &scenario{Name: "enqueue", Title: fmt.Sprintf("Enqueue: tasks due in an hour, 100-byte payloads, up to %d tasks or %s per run", o.enqMax, o.enqBound),
		Cols: []col{{"g1", "1 goroutine /s", "%.0f"}, {"g8", "8 goroutines /s", "%.0f"}, {"cmds", "redis cmds/task", "%.1f"}, {"top", "top-level/task", "%.3f"}, {"rcpu_per_1k", "redis CPU µs/task", "%.1f"}}}
	sc.Notes = append(sc.Notes, "Hourglass: client.EnqueueBatch, 1000 tasks per pipelined round trip; asynq: its client has no batch or pipeline API, so each goroutine calls EnqueueContext(ProcessAt) once per task (8 goroutines = 8 concurrent calls)")
	for _, sys := range systems {
		r := sc.row(sys.name())
		for _, g := range []int{1, 8} {
			sys.setPrefix(uniq("enq"))
			far := time.Now().Add(time.Hour)
			ts := make([]btask, o.enqMax)
			for i := range ts {
				ts[i] = btask{idx: i, due: far.Add(time.Duration(i%3600) * time.Second), payload: 100}
			}
			a, _ := sys.snap(ctx)
			t0 := time.Now()
			sent, err := enqueueAll(ctx, sys, ts, g, chunkFor(sys), t0.Add(o.enqBound))
			el := time.Since(t0)
			b, _ := sys.snap(ctx)
			if err != nil {
				r.note("enqueue (%d goroutines): %v", g, err)
			}
			r.set(fmt.Sprintf("g%d", g), float64(sent)/el.Seconds())
			if g == 1 {
				putCost(r, diff(a, b), sent)
			}
			logf("enqueue %s, %d goroutine(s): %d tasks in %s = %.0f/s", sys.name(), g, sent, el.Round(time.Millisecond), float64(sent)/el.Seconds())
			_ = sys.clear(ctx)
		}
	}
	return sc
}

// ---- 4. Idle ----

func runIdle(ctx context.Context, o sizes, hg *hgSystem, aqs []system, logf func(string, ...any)) *scenario {
	sc := &scenario{Name: "idle", Title: fmt.Sprintf("Idle: %d future tasks (due in 1–2 h, 100-byte payloads), scheduler(s) and workers running, %s window", o.idleN, o.idleWin),
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
		sent, err := enqueueAll(ctx, sys, ts, 8, chunkFor(sys), time.Time{})
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
	measure := func(sys system, r *row) {
		rec := newRecorder(1)
		stop, err := sys.startConsumer(ctx, rec)
		if err != nil {
			r.note("consumer: %v", err)
			return
		}
		time.Sleep(3 * time.Second)
		a, _ := sys.snap(ctx)
		time.Sleep(o.idleWin)
		b, _ := sys.snap(ctx)
		stop()
		w := diff(a, b)
		r.set("cps", float64(w.total)/w.secs)
		r.set("tps", float64(w.topLevel)/w.secs)
		r.set("cpu", w.cpu)
		r.note("commands in the window: %s", w.topCmds(10, 0))
		logf("idle %s: %.1f commands/s (%.1f top-level), redis CPU %.3f s", sys.name(), r.M["cps"], r.M["tps"], w.cpu)
	}
	r := sc.row(hg.name())
	fill(hg, r)
	measure(hg, r)
	r.note("a shard's mover sleeps until its next due time (or far-tier promotion) or scheduler.safety_recheck (30 s), its recovery loop, with nothing leased or ready, until the mover pokes it or scheduler.idle_recheck (5 min); the shards were acquired together, so their re-checks come in bursts every 30 s: a 10 s window reads 0 or about 10 commands/s depending on its phase, a 30 s window the average; the PINGs are go-redis's health checks of the schedulers' wake-up subscriptions (every 3 s)")
	_ = hg.clear(ctx)
	if len(aqs) > 0 {
		r0 := sc.row(aqs[0].name())
		fill(aqs[0], r0)
		for i, sys := range aqs {
			ri := sc.row(sys.name())
			if i > 0 {
				ri.set("mem", r0.M["mem"])
				ri.note("same stored tasks as %s", aqs[0].name())
			}
			measure(sys, ri)
		}
		_ = aqs[0].clear(ctx)
	}
	return sc
}

// sizedSteady runs the steady scenario for Hourglass once more, in an
// environment of its own (Redis, etcd, two schedulers) with the given
// number of shards, and adds its row to sc. At 2,000 tasks/s a shard of
// 16 sees a task every 8 ms, so every script call (enqueue, move, ack)
// carries one task; fewer shards let the calls carry several.
func sizedSteady(ctx context.Context, o sizes, sc *scenario, shards int, logf func(string, ...any)) {
	logf("steady again with %d shards: own Redis, etcd and schedulers", shards)
	if err := func() error {
		e, err := startEnv(ctx, logf, shards, false)
		if err != nil {
			return err
		}
		defer e.stop()
		hg, err := newHG(e)
		if err != nil {
			return err
		}
		defer hg.close()
		if err := hg.warmUp(ctx); err != nil {
			return err
		}
		sc.Rows = append(sc.Rows, runSteady(ctx, o, []system{hg}, logf).Rows...)
		return nil
	}(); err != nil {
		sc.Notes = append(sc.Notes, fmt.Sprintf("%d-shard run: %v", shards, err))
	}
}
