package reshard_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hourglass-sched/hourglass/internal/owner"
	"github.com/hourglass-sched/hourglass/internal/reshard"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestReadyTasksNobodyConsumesDoNotKeepTheChangeOpen (issue 24, item 8):
// ready tasks of a paused queue, and of a queue no worker serves, kept
// their old shard from being done, so the change never ended, with no
// word of why. Now each pass names them in
// hourglass_reshard_waiting_tasks, and they move to their new shard, ready
// there: a paused queue's at once, another's once they waited
// ReadyAfter. None is lost or run: each is ready in its new shard with
// its data.
func TestReadyTasksNobodyConsumesDoNotKeepTheChangeOpen(t *testing.T) {
	t.Parallel()
	e := shardtest.New(t, shardtest.Options{Shards: 1, Queues: map[string]shard.QueuePolicy{
		"paused": shardtest.Policy(), "idle": shardtest.Policy(),
	}})
	ctx := testenv.Ctx(t, time.Minute)
	// A ready task's wait counts from its due time, which is when it is
	// scheduled here (delay 0): the bound is measured from before that,
	// to the millisecond the due time is truncated to.
	started := time.Now().Truncate(time.Millisecond)
	var paused, idle []string
	for i := range 40 {
		paused = append(paused, fmt.Sprintf("p%d", i))
		idle = append(idle, fmt.Sprintf("i%d", i))
	}
	e.Ready("paused", paused...)
	e.Ready("idle", idle...)
	if _, err := e.Store.SetPaused(ctx, "paused", true); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Store.BeginResize(ctx, 2); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	const after = 3 * time.Second
	m, err := reshard.New(e.Store, reshard.Config{Retry: 50 * time.Millisecond, ReadyAfter: after,
		Paused: e.Store.Paused, Metrics: reshard.NewMetrics(reg)})
	if err != nil {
		t.Fatal(err)
	}
	e.Own(owner.Loop{Name: "reshard", Run: m.Run})
	// The paused queue's tasks move at once; the idle queue's wait, and
	// the metric names them meanwhile.
	testenv.WaitFor(t, 10*time.Second, "the paused queue's tasks moved, the idle queue's named", func() (bool, string) {
		named := waiting(t, reg, "0", "idle", "ready")
		return named > 0 && e.RDB.HLen(ctx, e.Layout().Tasks(1)).Val() > 0,
			fmt.Sprintf("waiting %v, shard 1 holds %d", named, e.RDB.HLen(ctx, e.Layout().Tasks(1)).Val())
	})
	if time.Since(started) < after {
		if rec, _ := e.Store.ReadLayout(ctx); rec.State != shard.LayoutResharding {
			t.Fatalf("the change ended before the idle queue's tasks waited %s: %+v", after, rec)
		}
	}
	waitStable(t, e, 1)
	if time.Since(started) < after {
		t.Fatalf("the change ended after %s, before the idle queue's tasks waited %s", time.Since(started), after)
	}
	e.MoveAhead(0) // the new shard's mover makes them ready again
	checkPlaced(t, e, 2, "ready", paused...)
	checkPlaced(t, e, 2, "ready", idle...)
	for _, id := range append(paused, idle...) {
		info, err := e.Store.Lookup(ctx, id)
		if err != nil || string(info.Task.Payload) != "p-"+id {
			t.Fatalf("%s: %+v %v", id, info, err)
		}
	}
	if n := e.ReadyLen(0, "idle") + e.ReadyLen(1, "idle"); n != int64(len(idle)) {
		t.Fatalf("%d entries in the idle queue's ready lists, want %d", n, len(idle))
	}
}

// waiting returns hourglass_reshard_waiting_tasks for shard, queue and
// why (0 when absent).
func waiting(t *testing.T, reg *prometheus.Registry, shard, queue, why string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "hourglass_reshard_waiting_tasks" {
			continue
		}
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["shard"] == shard && l["queue"] == queue && l["why"] == why {
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

// TestFairQueuesWaitingTasksMove: a fair queue's tasks that wait for
// their key's turn in its keys' lists, not in the ready list, kept their
// old shard from being done when nobody took them: a paused key's (weight
// 0) and a key's held at its cap. They move to their new shard once they
// waited ReadyAfter, with their level, and are waiting there again.
func TestFairQueuesWaitingTasksMove(t *testing.T) {
	t.Parallel()
	p := shardtest.Policy()
	p.FairWindow, p.KeyConcurrency = 4, 1
	e := shardtest.New(t, shardtest.Options{Shards: 1, Queues: map[string]shard.QueuePolicy{"f": p}})
	ctx := testenv.Ctx(t, time.Minute)
	if err := e.Store.SetKeyWeight(ctx, "f", "paused", 0); err != nil {
		t.Fatal(err)
	}
	var ids, high []string
	for i := range 12 {
		ids = append(ids, fmt.Sprintf("{paused}%d", i), fmt.Sprintf("{held}%d", i))
		high = append(high, fmt.Sprintf("{held}h%d", i))
	}
	e.Schedule("f", 0, ids...)
	args := make([]shard.EnqueueArgs, len(high))
	for i, id := range high {
		args[i] = shard.EnqueueArgs{ID: id, Queue: "f", MaxRetries: -1, Priority: shard.PriorityHigh}
	}
	for _, r := range e.Store.EnqueueBatch(ctx, args) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	ids = append(ids, high...)
	e.MoveAhead(0)
	// One of the held key's tasks took its permit and is in the window;
	// the rest wait in the keys' lists.
	if n := e.ReadyLen(0, "f"); n != 1 {
		t.Fatalf("the window holds %d, want the held key's one", n)
	}
	if _, err := e.Store.BeginResize(ctx, 2); err != nil {
		t.Fatal(err)
	}
	m, err := reshard.New(e.Store, reshard.Config{Retry: 50 * time.Millisecond, ReadyAfter: time.Second, Paused: e.Store.Paused})
	if err != nil {
		t.Fatal(err)
	}
	e.Own(owner.Loop{Name: "reshard", Run: m.Run})
	waitStable(t, e, 1)
	e.MoveAhead(0) // the new shard's mover puts them in their keys' lists again
	checkPlaced(t, e, 2, "ready", ids...)
	for _, id := range high {
		if info, err := e.Store.Lookup(ctx, id); err != nil || info.Task.Priority != shard.PriorityHigh {
			t.Fatalf("%s after the move: %+v %v, want high", id, info.Task, err)
		}
	}
}
