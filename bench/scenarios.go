package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// sizes are the scenario sizes of a full or a -quick run.
type sizes struct {
	burstN                int
	steadyRate            int
	steadyDur             time.Duration
	enqMax                int
	enqBound              time.Duration
	idleN                 int
	idleWin               time.Duration // Hourglass's idle window
	peerIdleWin           time.Duration // asynq's and BullMQ's
	capRates              []int         // steady capacity: the rates stepped through
	capStep               time.Duration // how long each capacity step produces
	costN                 int
	satN                  int
	failoverAfter         time.Duration // load after each takeover before the next step
	benchN                int
	hgBurstLead, aqBurstL time.Duration
	resultsN              int           // tasks of the results scenario
	resultsRetention      time.Duration // their queue's retention
	noisyBig, noisyQuiet  int           // the noisy scenario's big key's tasks and quiet keys
	keysN                 int           // the keys scenario's tasks, each with a key of its own
}

func sizesFor(quick bool) sizes {
	if quick {
		return sizes{burstN: 10000, steadyRate: 2000, steadyDur: 5 * time.Second, enqMax: 20000, enqBound: 3 * time.Second,
			idleN: 100000, idleWin: 10 * time.Second, peerIdleWin: 5 * time.Second,
			capRates: []int{2000, 4000, 8000, 12000, 16000}, capStep: 3 * time.Second, costN: 5000, satN: 10000, failoverAfter: time.Second,
			benchN: 50000, hgBurstLead: 2 * time.Second, aqBurstL: 3 * time.Second, resultsN: 10000, resultsRetention: 10 * time.Second,
			noisyBig: 20000, noisyQuiet: 100, keysN: 10000}
	}
	return sizes{burstN: 100000, steadyRate: 2000, steadyDur: 20 * time.Second, enqMax: 300000, enqBound: 6 * time.Second,
		idleN: 1000000, idleWin: idleWindow, peerIdleWin: time.Minute,
		capRates: []int{2000, 4000, 8000, 12000, 14000, 16000, 20000, 24000, 28000, 32000}, capStep: 10 * time.Second, costN: 50000, satN: 50000, failoverAfter: 2 * time.Second,
		benchN: 200000, hgBurstLead: 4 * time.Second, aqBurstL: 12 * time.Second, resultsN: 100000, resultsRetention: time.Minute,
		noisyBig: 200000, noisyQuiet: 1000, keysN: 100000}
}

// set stores a finite value.
func (r *row) set(k string, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return
	}
	r.M[k] = v
}

func (r *row) note(f string, a ...any) { r.Notes = append(r.Notes, fmt.Sprintf(f, a...)) }

// chunkFor is the batch size of a system's batched enqueues: asynq has
// no batch call, so its "chunks" are only units of work for a goroutine.
func chunkFor(sys system) int {
	if _, ok := sys.(*aqSystem); ok {
		return 100
	}
	return 1000
}

func uniq(s string) string { return fmt.Sprintf("%s%d", s, time.Now().UnixNano()%1e9) }

func latCols() []col {
	return []col{
		{"p50", "late p50 ms", "%.1f"}, {"p90", "p90 ms", "%.1f"}, {"p99", "p99 ms", "%.1f"}, {"max", "max ms", "%.0f"}, {"early", "early", "%.0f"},
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
	r.set("early", float64(s.Early))
	if s.Early > 0 {
		r.note("%d of %d tasks started before their due time (earliest %.1f ms early)%s", s.Early, s.Handled, -s.Min, earlyWhy(r.System))
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
	sc.Notes = append(sc.Notes, "enqueue from 8 goroutines (Hourglass: EnqueueBatch of 1000 per round trip; asynq: one EnqueueContext per task, its client has no batch API; BullMQ: Queue.addBulk of 1000); due = a whole second after the enqueue ends; drain = tasks / (last handler start − due); lateness = handler start − due; early = tasks started before their due time")
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
		sent, err := enqueueAll(ctx, sys.enqueue, ts, 8, chunkFor(sys), time.Time{})
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
		dropUnknown(sys, r)
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

// producer is how a system's load is sent: from senders goroutines,
// each tick's tasks in one call or, with split, spread over them.
type producer struct {
	senders int
	split   bool
}

// producerFor says how the steady load is sent to sys. Hourglass sends
// each tick's tasks in one EnqueueBatch, up to 4 of them in flight (one
// sender fell behind at 16,000 tasks/s over 16 shards: a tick's batch
// is 16 script calls); asynq spreads a tick's tasks over 8 goroutines
// (one call per task); BullMQ over 4 (one addBulk each).
func producerFor(sys system) producer {
	switch sys.(type) {
	case *hgSystem:
		return producer{senders: 4}
	case *bqSystem:
		return producer{senders: 4, split: true}
	}
	return producer{senders: 8, split: true}
}

// produce enqueues rate tasks/s with the given delay until n were
// produced or stop is closed, as p says; due is set when a task is
// produced. It returns how many it produced, and the generator's lag:
// the longest a tick's tasks waited for a sender, which, past a few
// milliseconds, means the load generator and not the system under test
// made the tasks late.
func produce(ctx context.Context, stop <-chan struct{}, sys system, rate, n int, delay time.Duration, payload int, p producer, onErr func(error)) (int, float64) {
	type batch struct {
		ts       []btask
		produced time.Time
	}
	ch := make(chan batch, 1024)
	var wg sync.WaitGroup
	var lagMu sync.Mutex
	var lags []float64 // ms
	for range p.senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range ch {
				l := float64(time.Since(b.produced)) / float64(time.Millisecond)
				lagMu.Lock()
				lags = append(lags, l)
				lagMu.Unlock()
				if _, err := sys.enqueue(ctx, b.ts); err != nil && ctx.Err() == nil {
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
		now := time.Now()
		due := now.Add(delay).Truncate(time.Millisecond)
		step := want - sent
		if p.split {
			step = max(1, step/p.senders)
		}
		for lo := sent; lo < want; lo += step {
			hi := min(lo+step, want)
			ts := make([]btask, 0, hi-lo)
			for i := lo; i < hi; i++ {
				ts = append(ts, btask{idx: i, due: due, payload: payload})
			}
			ch <- batch{ts, now}
		}
		sent = want
	}
	close(ch)
	wg.Wait()
	slices.Sort(lags)
	var p99 float64
	if len(lags) > 0 {
		p99 = lags[len(lags)*99/100]
	}
	return sent, p99
}

func runSteady(ctx context.Context, o sizes, systems []system, logf func(string, ...any)) *scenario {
	sc := &scenario{Name: "steady", Title: fmt.Sprintf("Steady: %d tasks/s for %s, each due 1 s after it is produced", o.steadyRate, o.steadyDur),
		Cols: append(latCols(), col{"absp99", "|late| p99 ms", "%.1f"}, col{"lost", "lost", "%.0f"}, col{"dups", "dups", "%.0f"},
			col{"cmds", "redis cmds/task", "%.1f"}, col{"top", "top-level/task", "%.2f"}, col{"reads", "round trips/task", "%.2f"}, col{"wakes", "redis wake-ups/task", "%.2f"}, col{"rcpu_per_1k", "redis CPU µs/task", "%.1f"})}
	sc.Notes = append(sc.Notes, fmt.Sprintf("lost = never handled within 10 s after the last due time; early = started before the due time; the producer ticks every %s (flag -tick): Hourglass enqueues each tick's tasks in one EnqueueBatch (up to 4 in flight), asynq spreads them over 8 goroutines, BullMQ over 4 addBulk calls; every system's tasks carry the ids its client generates (Hourglass's client places them 64 in a row in one shard, shard.Runs)", *steadyTick))
	for _, sys := range systems {
		r := sc.row(sys.name())
		s, w, ok := steadyOnce(ctx, sys, o.steadyRate, o.steadyDur, r, true)
		if ok {
			logf("steady %s: p50 %.1f p90 %.1f p99 %.1f max %.0f ms, early %d lost %d dups %d, redis CPU %.1f µs/task", sys.name(), s.P50, s.P90, s.P99, s.Max, s.Early, s.Lost, s.Dups, r.M["rcpu_per_1k"])
			r.note("per task: %s", w.topCmds(12, int64(max(s.Handled, 1))))
			r.note("Redis CPU: %.0f%% of it system time (the kernel: sockets, epoll)", 100*w.cpuSys/max(w.cpu, 1e-9))
		}
	}
	return sc
}

// ---- 3. Enqueue ----

func runEnqueue(ctx context.Context, o sizes, systems []system, logf func(string, ...any)) *scenario {
	sc := &scenario{Name: "enqueue", Title: fmt.Sprintf("Enqueue: tasks due in an hour, 100-byte payloads, up to %d tasks or %s per run", o.enqMax, o.enqBound),
		Cols: []col{{"g1", "batched, 1 goroutine /s", "%.0f"}, {"g8", "batched, 8 goroutines /s", "%.0f"}, {"u64", "unbatched, 64 goroutines /s", "%.0f"},
			{"cmds", "redis cmds/task", "%.1f"}, {"top", "top-level/task", "%.3f"}, {"rcpu_per_1k", "redis CPU µs/task", "%.1f"}, {"u_rcpu", "unbatched redis CPU µs/task", "%.1f"}}}
	sc.Notes = append(sc.Notes, "batched — Hourglass: client.EnqueueBatch, 1000 tasks per pipelined round trip; BullMQ: Queue.addBulk of 1000 (one MULTI); asynq: its client has no batch or pipeline API, so each goroutine calls EnqueueContext(ProcessAt) once per task. Unbatched: 64 goroutines each calling the single-task call (Hourglass Client.Enqueue, asynq EnqueueContext, BullMQ Queue.add) one task at a time, the way most callers use it. Costs per task are the 1-goroutine batched run's, and the unbatched run's in the last column",
		"BullMQ's calls cross a pipe to its Node client process (one JSON line per call): at 64 concurrent calls that process, not Redis, may be what limits it")
	for _, sys := range systems {
		r := sc.row(sys.name())
		for _, run := range []struct {
			key  string
			g    int
			each bool
		}{{"g1", 1, false}, {"g8", 8, false}, {"u64", 64, true}} {
			sys.setPrefix(uniq("enq"))
			far := time.Now().Add(time.Hour)
			ts := make([]btask, o.enqMax)
			for i := range ts {
				ts[i] = btask{idx: i, due: far.Add(time.Duration(i%3600) * time.Second), payload: 100}
			}
			send, chunk := sys.enqueue, chunkFor(sys)
			if run.each {
				send, chunk = sys.enqueueEach, 1
			}
			a, _ := sys.snap(ctx)
			t0 := time.Now()
			sent, err := enqueueAll(ctx, send, ts, run.g, chunk, t0.Add(o.enqBound))
			el := time.Since(t0)
			b, _ := sys.snap(ctx)
			if err != nil {
				r.note("enqueue (%s): %v", run.key, err)
			}
			r.set(run.key, float64(sent)/el.Seconds())
			switch run.key {
			case "g1":
				putCost(r, diff(a, b), sent)
				dropUnknown(sys, r)
			case "u64":
				r.set("u_rcpu", 1e6*diff(a, b).cpu/float64(max(sent, 1)))
			}
			logf("enqueue %s, %s: %d tasks in %s = %.0f/s", sys.name(), run.key, sent, el.Round(time.Millisecond), float64(sent)/el.Seconds())
			_ = sys.clear(ctx)
		}
	}
	return sc
}

// dropUnknown removes the figures a system's accounting cannot give:
// BullMQ's clients are Node processes without a command hook, so its
// top-level calls are not known.
func dropUnknown(sys system, r *row) {
	if _, ok := sys.(*bqSystem); ok {
		delete(r.M, "top")
		delete(r.M, "tps")
	}
}

// earlyWhy explains early starts where the system is known to make them.
func earlyWhy(system string) string {
	if strings.HasPrefix(system, "asynq") {
		return ": asynq stores due times in whole seconds"
	}
	return ""
}
