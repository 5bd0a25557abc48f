package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/worker"
)

// ---- Results and their retention (#27) ----

// resultsQueue is the queue of the results scenario: registered by the
// bench itself with a retention, beside the schedulers' "default" (a
// scheduler leaves queues it does not configure alone, and its recovery
// loops prune every queue's records).
const resultsQueue = "results"

// runResults stores n tasks' results of 1 KiB in a queue whose retention
// is retention, and reports Redis's memory before, with the results kept
// and once the owners' recovery loops have deleted them (with how long
// after the retention that took), and how soon a client.Wait started
// before its task ran returns after the task's ack (the time Redis
// recorded it, in ms: p50/p99 over waited tasks, while the worker drains
// the rest at full speed).
func runResults(ctx context.Context, hg *hgSystem, n, waited int, retention time.Duration, logf func(string, ...any)) *scenario {
	sc := &scenario{Name: "results", Title: fmt.Sprintf("Results: %d tasks with 1 KiB results, retention %s; client.Wait on %d of them", n, retention, waited),
		Cols: []col{{"base", "memory before MB", "%.1f"}, {"kept", "with results MB", "%.1f"}, {"per", "bytes/record", "%.0f"},
			{"after", "after retention MB", "%.1f"}, {"gone", "deleted s after retention", "%.2f"},
			{"w50", "ack → Wait returns p50 ms", "%.2f"}, {"w99", "p99 ms", "%.2f"}}}
	sc.Notes = append(sc.Notes, "memory = Redis used_memory; the records are deleted by the shard owners' recovery passes, which wake at the earliest expiry; Wait is woken by the task's done channel (pub/sub)")
	r := sc.row("hourglass")
	_ = hg.clear(ctx)
	defer func() { _ = hg.clear(ctx) }()
	hg.setPrefix(uniq("res"))
	rdb := hg.e.dial(hg.workN)
	defer rdb.Close()
	store := shard.NewStore(rdb, hg.e.layout)
	if err := store.RegisterQueues(ctx, map[string]shard.QueuePolicy{resultsQueue: {MaxRetries: 3, Timeout: 30 * time.Second,
		MaxPayload: shard.DefaultMaxPayload, Retention: shard.Retention{Age: retention, Count: shard.MaxRetentionCount}}}); err != nil {
		r.note("register: %v", err)
		return sc
	}
	time.Sleep(time.Second) // a quiet moment for the baseline
	before, err := hg.snap(ctx)
	if err != nil {
		r.note("%v", err)
		return sc
	}
	var handled atomic.Int64
	result := make([]byte, 1024)
	w, err := worker.New(rdb, workerConfig(hg.e.shards, prometheus.NewRegistry()))
	if err == nil {
		err = w.Handle(resultsQueue, func(_ context.Context, t *worker.Task) error {
			if err := t.SetResult(result); err != nil {
				return err
			}
			handled.Add(1)
			return nil
		}, queueOptions(concurrency))
	}
	if err != nil {
		r.note("worker: %v", err)
		return sc
	}
	wctx, stopWorker := context.WithCancel(ctx)
	workerDone := make(chan struct{})
	go func() { defer close(workerDone); _ = w.Run(wctx) }()
	defer func() { stopWorker(); <-workerDone }()

	// Due in 2 s: the Waits start before their tasks run.
	due := time.Now().Add(2 * time.Second)
	const chunk = 1000
	for i := 0; i < n; i += chunk {
		batch := make([]client.Task, 0, chunk)
		for k := i; k < min(n, i+chunk); k++ {
			batch = append(batch, client.Task{ID: hg.id(k), Queue: resultsQueue, Payload: payloadOf(16, ""), At: due})
		}
		if _, err := hg.cli.EnqueueBatch(ctx, batch); err != nil {
			r.note("enqueue: %v", err)
			return sc
		}
	}
	// Each Wait's return, and its task's ack as Redis recorded it (the
	// record's time, ms).
	returned, acked := make([]time.Time, waited), make([]time.Time, waited)
	var wg sync.WaitGroup
	var waitErr atomic.Value
	for i := range waited {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t, err := hg.cli.Wait(ctx, hg.id(i*(n/waited)))
			returned[i], acked[i] = time.Now(), t.Ended
			if err == nil && t.State != client.StateSucceeded {
				err = fmt.Errorf("%s ended %s", t.ID, t.State)
			}
			if err != nil {
				waitErr.Store(err)
			}
		}()
	}
	if !waitUntil(ctx, 5*time.Minute, func() bool { return handled.Load() >= int64(n) }) {
		r.note("only %d of %d tasks handled", handled.Load(), n)
		return sc
	}
	wg.Wait()
	if err, _ := waitErr.Load().(error); err != nil {
		r.note("wait: %v", err)
		return sc
	}
	allEnded := time.Now()
	time.Sleep(time.Second) // the last successes recorded
	kept, _ := hg.snap(ctx)
	lat := make([]float64, 0, waited)
	for i := range waited {
		lat = append(lat, float64(max(returned[i].Sub(acked[i]), 0))/float64(time.Millisecond))
	}
	slices.Sort(lat)
	mb := func(b int64) float64 { return float64(b) / (1 << 20) }
	r.set("base", mb(before.mem))
	r.set("kept", mb(kept.mem))
	r.set("per", float64(kept.mem-before.mem)/float64(n))
	r.set("w50", lat[waited/2])
	r.set("w99", lat[waited*99/100])

	// The records go once their retention ends: every shard's index of
	// the queue deleted (the ended hash may hold other queues' records).
	l := hg.e.layout
	gone := func() bool {
		keys := []string{}
		for sh := range l.Shards() {
			keys = append(keys, l.EndedIndex(sh, resultsQueue))
		}
		c, err := rdb.Exists(ctx, keys...).Result()
		return err == nil && c == 0
	}
	if !waitUntil(ctx, retention+2*time.Minute, gone) {
		r.note("records still stored %s after the retention", 2*time.Minute)
		return sc
	}
	r.set("gone", time.Since(allEnded.Add(retention)).Seconds())
	time.Sleep(time.Second)
	after, _ := hg.snap(ctx)
	r.set("after", mb(after.mem))
	logf("results: %d tasks, %.1f MB before, %.1f MB with their results (%.0f bytes/record), %.1f MB after the retention; Wait p50 %.2f ms, p99 %.2f ms",
		n, mb(before.mem), mb(kept.mem), r.M["per"], mb(after.mem), lat[waited/2], lat[waited*99/100])
	return sc
}
