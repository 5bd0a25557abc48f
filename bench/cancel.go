package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hourglass-sched/hourglass/worker"
)

// ---- Cancel of running tasks (#27) ----

// runCancel measures how soon a running task's handler hears that it was
// cancelled from another client: n tasks run at once in the bench's
// in-process worker, handlers waiting on their ctx; each is cancelled by
// client.Cancel (another connection, as from another process), and the
// figure is the time from Cancel's return to the handler seeing its ctx
// end (cause worker.ErrCancelled), p50/p99/max, with the Redis cost of
// one cancel.
func runCancel(ctx context.Context, hg *hgSystem, n int, logf func(string, ...any)) *scenario {
	hg.named = true // tasks are looked at by id
	defer func() { hg.named = false }()
	sc := &scenario{Name: "cancel", Title: fmt.Sprintf("Cancel of running tasks: %d handlers waiting on their ctx, each cancelled by client.Cancel", n),
		Cols: []col{{"p50", "cancel → ctx done p50 ms", "%.2f"}, {"p99", "p99 ms", "%.2f"}, {"max", "max ms", "%.2f"},
			{"cmds", "redis cmds/cancel", "%.1f"}, {"rcpu_per_1k", "redis CPU µs/cancel", "%.1f"}}}
	sc.Notes = append(sc.Notes, "the worker hears the cancel on the deployment's cancel channel (pub/sub) and cancels that handler's ctx; target p99 ≤ 100 ms on one Redis (#27)")
	r := sc.row("hourglass")
	_ = hg.clear(ctx)
	defer func() { _ = hg.clear(ctx) }()
	hg.setPrefix(uniq("cancel"))
	var mu sync.Mutex
	started := map[string]bool{}
	ended := map[string]time.Time{}
	stop, err := hg.runWorker(ctx, prometheus.NewRegistry(), func(hctx context.Context, t *worker.Task) error {
		mu.Lock()
		started[t.ID] = true
		mu.Unlock()
		<-hctx.Done()
		if context.Cause(hctx) == worker.ErrCancelled {
			mu.Lock()
			ended[t.ID] = time.Now()
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		r.note("worker: %v", err)
		return sc
	}
	defer stop()
	ts := make([]btask, n)
	for i := range ts {
		ts[i] = btask{idx: i, due: time.Now(), payload: 16}
	}
	if sent, err := hg.enqueue(ctx, ts); err != nil || sent != n {
		r.note("enqueue: %d of %d: %v", sent, n, err)
		return sc
	}
	if !waitUntil(ctx, 30*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(started) == n }) {
		r.note("only %d of %d handlers started", len(started), n)
		return sc
	}
	a, _ := hg.snap(ctx)
	returned := make([]time.Time, n)
	for i := range n {
		if _, err := hg.cli.Cancel(ctx, hg.id(i)); err != nil {
			r.note("cancel %s: %v", hg.id(i), err)
			return sc
		}
		returned[i] = time.Now()
	}
	b, _ := hg.snap(ctx)
	if !waitUntil(ctx, 30*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(ended) == n }) {
		r.note("only %d of %d handlers saw their cancel", len(ended), n)
		return sc
	}
	lat := make([]float64, 0, n)
	for i := range n {
		lat = append(lat, float64(max(ended[hg.id(i)].Sub(returned[i]), 0))/float64(time.Millisecond))
	}
	slices.Sort(lat)
	r.set("p50", lat[n/2])
	r.set("p99", lat[n*99/100])
	r.set("max", lat[n-1])
	putCost(r, diff(a, b), n)
	logf("cancel: %d running tasks, cancel → ctx done p50 %.2f ms, p99 %.2f ms", n, lat[n/2], lat[n*99/100])
	return sc
}

// waitUntil polls cond every millisecond until it holds (true) or d or
// ctx ends (false).
func waitUntil(ctx context.Context, d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}
