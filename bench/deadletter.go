package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/worker"
)

// ---- Dead-letter replay ----

// runDeadLetter measures what replaying the dead-letter set costs: n
// tasks are dead-lettered (a worker whose handler refuses every task
// with worker.NoRetry), then one inspect.ReplayDead call puts them all
// back, due in an hour so that none runs meanwhile. Figures: tasks
// replayed per second, and Redis commands, top-level calls and Redis CPU
// per replayed task, over the replay alone.
func runDeadLetter(ctx context.Context, o sizes, hg *hgSystem, logf func(string, ...any)) *scenario {
	n := o.burstN / 2
	sc := &scenario{Name: "deadletter", Title: fmt.Sprintf("Dead-letter replay: %d dead tasks of one queue put back by one inspect.ReplayDead (due in an hour)", n),
		Cols: []col{{"rate", "replayed/s", "%.0f"}, {"cmds", "redis cmds/task", "%.2f"}, {"top", "top-level/task", "%.3f"}, {"rcpu_per_1k", "redis CPU µs/task", "%.1f"}}}
	sc.Notes = append(sc.Notes, "the tasks are dead-lettered first by a worker whose handler returns worker.NoRetry; the figures cover the replay only (INFO commandstats and cpu before and after it); the CLI's `dlq replay --all` and the dashboard's bulk replay run the same call")
	r := sc.row("hourglass")
	_ = hg.clear(ctx)
	defer func() { _ = hg.clear(ctx) }()
	hg.setPrefix(uniq("dead"))
	if err := deadLetter(ctx, hg, n); err != nil {
		r.note("%v", err)
		return sc
	}
	ins, err := inspect.New(hg.e.hgAdmin, inspect.Config{Namespace: namespace, Shards: hg.e.shards})
	if err != nil {
		r.note("inspect: %v", err)
		return sc
	}
	a, err := hg.snap(ctx)
	if err != nil {
		r.note("%v", err)
		return sc
	}
	t0 := time.Now()
	p, err := ins.ReplayDead(ctx, inspect.DeadFilter{Queue: hgQueue}, time.Now().Add(time.Hour), nil)
	el := time.Since(t0)
	b, _ := hg.snap(ctx)
	if err != nil {
		r.note("replay: %v", err)
		return sc
	}
	r.note("replayed %d of %d in %s: %+v", p.Done, n, el.Round(time.Millisecond), p)
	r.set("rate", float64(p.Done)/el.Seconds())
	putCost(r, diff(a, b), int(p.Done))
	logf("deadletter: replayed %d tasks in %s (%.0f/s), redis CPU %.1f µs/task", p.Done, el.Round(time.Millisecond), r.M["rate"], r.M["rcpu_per_1k"])
	return sc
}

// errDeadOnPurpose is what the dead-lettering handler returns.
var errDeadOnPurpose = errors.New("bench: dead on purpose")

// deadLetter enqueues n tasks due now and runs a worker whose handler
// refuses each (worker.NoRetry) until all n are in the dead-letter sets.
func deadLetter(ctx context.Context, hg *hgSystem, n int) error {
	stop, err := hg.runWorker(ctx, prometheus.NewRegistry(), func(context.Context, *worker.Task) error { return worker.NoRetry(errDeadOnPurpose) })
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	defer stop()
	due := time.Now().Truncate(time.Millisecond)
	ts := make([]btask, n)
	for i := range ts {
		ts[i] = btask{idx: i, due: due, payload: 100}
	}
	if sent, err := enqueueAll(ctx, hg.enqueue, ts, 8, chunkFor(hg), time.Time{}); err != nil || sent != n {
		return fmt.Errorf("enqueue: %d of %d: %v", sent, n, err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		dead, err := hg.deadCount(ctx)
		switch {
		case err != nil:
			return err
		case dead >= int64(n):
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("%d of %d tasks dead-lettered after 60 s", dead, n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond): // polling Redis's state with a deadline
		}
	}
}

// deadCount sums the dead-letter sets of every shard (ZCARD, one
// pipelined round trip through the admin client).
func (h *hgSystem) deadCount(ctx context.Context) (int64, error) {
	pipe := h.e.hgAdmin.Pipeline()
	cmds := make([]*redis.IntCmd, h.e.shards)
	for sh := range cmds {
		cmds[sh] = pipe.ZCard(ctx, h.e.layout.Dead(sh))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fmt.Errorf("count dead tasks: %w", err)
	}
	var n int64
	for _, c := range cmds {
		n += c.Val()
	}
	return n, nil
}
