package reshard_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/owner"
	"github.com/hourglass-sched/hourglass/internal/reshard"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// waitStable waits until the layout record is stable at generation gen.
func waitStable(t *testing.T, e *shardtest.Env, gen int64) shard.LayoutRecord {
	t.Helper()
	var rec shard.LayoutRecord
	testenv.WaitFor(t, 20*time.Second, fmt.Sprintf("generation %d stable", gen), func() (bool, string) {
		var err error
		rec, err = e.Store.ReadLayout(context.Background())
		if err != nil {
			return false, err.Error()
		}
		return rec.Gen == gen && rec.State == shard.LayoutStable, fmt.Sprintf("%+v", rec)
	})
	return rec
}

// checkPlaced fails unless every id is stored in its shard of n, in
// state want.
func checkPlaced(t *testing.T, e *shardtest.Env, n int, want string, ids ...string) {
	t.Helper()
	ctx := testenv.Ctx(t, 10*time.Second)
	for _, id := range ids {
		if !e.RDB.HExists(ctx, e.Layout().Tasks(testenv.ShardOf(id, n)), id).Val() {
			t.Errorf("%s is not in its shard %d of %d", id, testenv.ShardOf(id, n), n)
		}
		if s := e.State(id); s != want {
			t.Errorf("%s is %q, want %q", id, s, want)
		}
	}
}

// TestGrowThenShrinkMovesEveryTask: 2 -> 5 -> 3 shards with the owner
// loops of every shard running: scheduled and dead tasks end in their
// shard of the new count, as they were; the dropped shards are deleted.
func TestGrowThenShrinkMovesEveryTask(t *testing.T) {
	t.Parallel()
	e := shardtest.New(t, shardtest.Options{})
	ctx := testenv.Ctx(t, time.Minute)
	var later []string
	for i := range 300 {
		later = append(later, fmt.Sprintf("later-%d", i))
	}
	e.Schedule(shardtest.Queue, time.Hour, later...)
	dead := e.Dead(shardtest.Queue, "dead-", 20)

	m, err := reshard.New(e.Store, reshard.Config{Retry: 50 * time.Millisecond, Batch: 64})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Store.BeginResize(ctx, 5); err != nil {
		t.Fatal(err)
	}
	e.Own(owner.Loop{Name: "reshard", Run: m.Run})
	rec := waitStable(t, e, 1)
	checkPlaced(t, e, 5, "scheduled", later...)
	checkPlaced(t, e, 5, "dead", dead...)
	if rec.Moved == 0 {
		t.Error("the record counts no task moved")
	}

	if _, err := e.Store.BeginResize(ctx, 3); err != nil {
		t.Fatal(err)
	}
	m.LayoutChanged()
	waitStable(t, e, 2)
	checkPlaced(t, e, 3, "scheduled", later...)
	checkPlaced(t, e, 3, "dead", dead...)
	for sh := 3; sh < 5; sh++ {
		l := e.Layout()
		for _, k := range []string{l.Tasks(sh), l.Delayed(sh), l.Dead(sh), l.Queues(sh), l.Counts(sh)} {
			if e.RDB.Exists(ctx, k).Val() != 0 {
				t.Errorf("dropped shard %d still has %s", sh, k)
			}
		}
		if e.RDB.Exists(ctx, l.Marker(sh)).Val() != 1 {
			t.Errorf("dropped shard %d lost its layout marker", sh)
		}
	}
}

// bareDead makes dead letters without task data in shard sh of e's
// layout, ids prefix0.. that hash there, as the mover makes them of
// delayed-set members whose data is gone (written by hand, or a producer
// that skipped enqueue.lua): it buries them with the reason "no task
// data". It returns the ids.
func bareDead(t *testing.T, e *shardtest.Env, sh, n int, prefix string) []string {
	t.Helper()
	ctx := testenv.Ctx(t, 10*time.Second)
	ids := e.IDsIn(sh, n, prefix)
	for _, id := range ids {
		if err := e.RDB.ZAdd(ctx, e.Layout().Delayed(sh), redis.Z{Score: 1, Member: id}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.Store.Move(ctx, sh, shardtest.Epoch, 1000); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if info, err := e.Lookup(id); err != nil || info.State != "dead" || !strings.Contains(info.DeadInfo, "no task data") {
			t.Fatalf("%s: %+v, %v; want a dead letter without data", id, info, err)
		}
	}
	return ids
}

// TestDeadLettersWithoutDataMove: dead letters whose task data is gone
// (the mover buries a delayed-set member without data) move with a change
// of the shard count like the others, to be found, listed and purged by
// id in their new shard. The reshard scans the task hash, where they are
// not: they stayed in their old shard, out of reach of the lookups by id
// once the change ended, and a shrink deleted them with the shard.
func TestDeadLettersWithoutDataMove(t *testing.T) {
	t.Parallel()
	e := shardtest.New(t, shardtest.Options{})
	ctx := testenv.Ctx(t, time.Minute)
	bare := append(bareDead(t, e, 0, 10, "bare-a"), bareDead(t, e, 1, 10, "bare-b")...)
	m, err := reshard.New(e.Store, reshard.Config{Retry: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	e.Own(owner.Loop{Name: "reshard", Run: m.Run})
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { stop(); wg.Wait() })
	for sh := 2; sh < 4; sh++ { // the owners of the new shards
		wg.Add(1)
		go func() { defer wg.Done(); _ = m.Run(runCtx, owner.Shard{ID: sh, Epoch: shardtest.Epoch}) }()
	}
	check := func(n int) {
		t.Helper()
		for _, id := range bare {
			sh := testenv.ShardOf(id, n)
			if e.RDB.ZScore(ctx, e.Layout().Dead(sh), id).Err() != nil {
				t.Errorf("%s is not a dead letter of its shard %d of %d", id, sh, n)
			}
			if info, err := e.Lookup(id); err != nil || info.State != "dead" || !strings.Contains(info.DeadInfo, "no task data") {
				t.Errorf("%s after the change to %d shards: %+v, %v; want its dead letter", id, n, info, err)
			}
		}
		for sh := range 4 { // every dead letter here names no queue: count "d|"
			counted, _ := e.RDB.HGet(ctx, e.Layout().Counts(sh), "d|").Int64()
			if held := e.RDB.ZCard(ctx, e.Layout().Dead(sh)).Val(); counted != held {
				t.Errorf("shard %d counts %d dead letters without a queue, holds %d", sh, counted, held)
			}
		}
	}
	if _, err := e.Store.BeginResize(ctx, 4); err != nil {
		t.Fatal(err)
	}
	m.LayoutChanged()
	waitStable(t, e, 1)
	check(4)
	if _, err := e.Store.BeginResize(ctx, 2); err != nil {
		t.Fatal(err)
	}
	m.LayoutChanged()
	waitStable(t, e, 2)
	check(2)
}

// exportAway schedules n tasks an hour ahead in shard 0 (ids prefix…),
// starts a change to shards, and exports those whose shard changes with
// shardtest.Epoch, as an owner that then stops would. It returns the ids,
// the new layout, the exported ids and their entries.
func exportAway(t *testing.T, e *shardtest.Env, shards, n int, prefix string) (ids []string, l shard.Layout, away []string, tasks []shard.Exported) {
	t.Helper()
	ctx := testenv.Ctx(t, time.Minute)
	ids = e.IDsIn(0, n, prefix)
	e.Schedule(shardtest.Queue, time.Hour, ids...)
	l, err := e.Store.BeginResize(ctx, shards)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if l.ShardOf(id) != 0 {
			away = append(away, id)
		}
	}
	r, err := e.Store.Export(ctx, e.Layout(), 0, shardtest.Epoch, time.Second, away)
	if err != nil || len(r.Tasks) != len(away) {
		t.Fatalf("export: %d of %d, %v", len(r.Tasks), len(away), err)
	}
	return ids, l, away, r.Tasks
}

// TestResumesABatchLeftInTheOutbox: an owner exported a batch and died
// before importing it. Its tasks stay visible (lookup, dedupe) in the
// outbox, the next owner (a newer epoch) imports and commits them, and
// the dead owner's epoch is refused.
func TestResumesABatchLeftInTheOutbox(t *testing.T) {
	t.Parallel()
	e := shardtest.New(t, shardtest.Options{})
	ctx := testenv.Ctx(t, time.Minute)
	ids, _, away, _ := exportAway(t, e, 4, 200, "t-")
	// In the outbox: still found, still a duplicate.
	if s := e.State(away[0]); s != "scheduled" {
		t.Fatalf("%s in the outbox looks %q, want scheduled", away[0], s)
	}
	if res := e.Store.Enqueue(ctx, shard.EnqueueArgs{ID: away[0], Queue: shardtest.Queue, MaxRetries: -1}); !errors.Is(res.Err, shard.ErrDuplicate) {
		t.Fatalf("enqueue of %s in the outbox: %v, want a duplicate", away[0], res.Err)
	}

	// The next owner of every shard: epoch 2.
	m, err := reshard.New(e.Store, reshard.Config{Retry: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		errs := make(chan error, 4)
		for sh := range 4 {
			go func() { errs <- m.Run(runCtx, owner.Shard{ID: sh, Epoch: shardtest.Epoch + 1}) }()
		}
		for range 4 {
			<-errs
		}
	}()
	t.Cleanup(func() { stop(); <-done })
	waitStable(t, e, 1)
	checkPlaced(t, e, 4, "scheduled", ids...)
	if n := e.RDB.HLen(ctx, e.Layout().Outbox(0)).Val(); n != 0 {
		t.Errorf("outbox of shard 0 still holds %d entries", n)
	}
	if _, err := e.Store.Export(ctx, e.Layout(), 0, shardtest.Epoch, time.Second, ids); !errors.Is(err, shard.ErrStaleEpoch) {
		t.Errorf("export with the dead owner's epoch: %v, want ErrStaleEpoch", err)
	}
}

// TestNextOwnerKeepsABatchTheOldOwnerCommitsMeanwhile: the next owner of
// a shard (B) reads a batch left in the outbox, and the old owner (A, a
// zombie whose lease expired, still connected to Redis) commits that batch
// right then, which A's epoch still allows. B must not take the entries
// it then misses for cancelled ones: every task of the batch stays. Once
// B re-imported (skipped: imported already), its commit found no entries,
// and its unimport deleted the only copies: the whole batch was lost.
func TestNextOwnerKeepsABatchTheOldOwnerCommitsMeanwhile(t *testing.T) {
	t.Parallel()
	e := shardtest.New(t, shardtest.Options{Shards: 1})
	ctx := testenv.Ctx(t, time.Minute)
	// Owner A (epoch 1): export and import, then it stalls before its commit.
	_, l, away, exported := exportAway(t, e, 2, 50, "z-")
	if _, err := e.Store.Import(ctx, l, 1, exported); err != nil {
		t.Fatal(err)
	}
	// Owner B (epoch 2) starts its pass; A's commit lands right after B
	// read the outbox.
	var zombie atomic.Bool
	h := &testenv.AfterCommand{Match: testenv.CommandOn("hgetall", l.Outbox(0)), Fn: func() {
		if _, err := e.Store.Commit(ctx, 0, shardtest.Epoch, away); err != nil {
			t.Errorf("zombie commit: %v", err)
		}
		zombie.Store(true)
	}}
	storeB := shard.NewStore(testenv.HookedClient(t, e.RDB, h), l)
	m, err := reshard.New(storeB, reshard.Config{Retry: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for sh := range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); _ = m.Run(runCtx, owner.Shard{ID: sh, Epoch: shardtest.Epoch + 1}) }()
	}
	t.Cleanup(func() { stop(); wg.Wait() })
	waitStable(t, e, 1)
	if !zombie.Load() {
		t.Fatal("the next owner never read the outbox: no zombie commit to test")
	}
	lost := 0
	for _, id := range away {
		if e.State(id) == "gone" {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d scheduled tasks were deleted by the change of the shard count", lost, len(away))
	}
}

// TestAPausedOwnerCannotBringBackATaskCancelledOnItsWay: owner A (epoch
// 1) exported a batch and was paused (a stopped VM, a long GC) before it
// imported it. Meanwhile a user cancelled one of the tasks, in the
// outbox, and the next owner B (epoch 2) resumed the batch and, finding
// nothing imported for the cancelled one, forgot it. Then A wakes up and
// imports its batch into the new shard, a call no epoch fences (another
// shard, on a cluster another node): the cancelled task must not come
// back. It once did, and ran.
func TestAPausedOwnerCannotBringBackATaskCancelledOnItsWay(t *testing.T) {
	t.Parallel()
	e := shardtest.New(t, shardtest.Options{Shards: 1})
	ctx := testenv.Ctx(t, time.Minute)
	ds := e.Popped(shardtest.Queue, "busy-", 8) // keep the change open
	_, l, away, exported := exportAway(t, e, 2, 50, "p-")
	victim := away[0]
	if st, err := e.Store.Cancel(ctx, victim); err != nil || st != "scheduled" {
		t.Fatalf("cancel %s on its way: %q, %v", victim, st, err)
	}

	m, err := reshard.New(e.Store, reshard.Config{Retry: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for sh := range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); _ = m.Run(runCtx, owner.Shard{ID: sh, Epoch: shardtest.Epoch + 1}) }()
	}
	t.Cleanup(func() { stop(); wg.Wait() })
	testenv.WaitFor(t, 20*time.Second, "B resumes the batch and forgets the cancelled entry", func() (bool, string) {
		n := e.RDB.Exists(ctx, l.Outbox(0), l.Cancelled(0)).Val()
		return n == 0, fmt.Sprintf("%d of the outbox and the cancelled hash left", n)
	})
	checkPlaced(t, e, 2, "scheduled", away[1:]...)
	if rec, err := e.Store.ReadLayout(ctx); err != nil || rec.State != shard.LayoutResharding {
		t.Fatalf("record %+v, %v; the late import must come while the change runs", rec, err)
	}

	// A wakes up and goes on with its batch.
	n, err := e.Store.Import(ctx, l, 1, exported)
	if err != nil {
		t.Fatalf("A's late import: %v", err)
	}
	if s := e.State(victim); s != "gone" || n != 0 {
		t.Fatalf("A's late import stored %d tasks; %s, cancelled on its way, is %q again and will run", n, victim, s)
	}
	if _, err := e.Store.Commit(ctx, 0, shardtest.Epoch, away); !errors.Is(err, shard.ErrStaleEpoch) {
		t.Errorf("A's commit: %v, want ErrStaleEpoch", err)
	}
	release(t, e, ds)
	e.Gone(victim)
	checkPlaced(t, e, 2, "scheduled", away[1:]...)
}

// TestTasksInFlightKeepTheChangeOpen: a task leased in a shard it no
// longer belongs to stays there; the change ends only once it is
// settled.
func TestTasksInFlightKeepTheChangeOpen(t *testing.T) {
	t.Parallel()
	e, ctx, ds := heldOpen(t)
	var moving []shard.Delivery
	for _, d := range ds {
		if testenv.ShardOf(d.Task.ID, 2) != 0 {
			moving = append(moving, d)
		}
	}
	if len(moving) == 0 {
		t.Fatal("no popped task changes shard; pick other ids")
	}
	reg := prometheus.NewRegistry()
	m, err := reshard.New(e.Store, reshard.Config{Retry: 20 * time.Millisecond, Metrics: reshard.NewMetrics(reg)})
	if err != nil {
		t.Fatal(err)
	}
	e.Own(owner.Loop{Name: "reshard", Run: m.Run})
	// Ten passes of each shard while the popped tasks are in flight: the
	// change must not end, and the tasks must stay in shard 0.
	waitPasses(t, reg, 20)
	if rec, err := e.Store.ReadLayout(ctx); err != nil || rec.State != shard.LayoutResharding {
		t.Fatalf("record %+v, %v while tasks are in flight; want resharding", rec, err)
	}
	for _, d := range moving {
		if !e.RDB.HExists(ctx, e.Layout().Tasks(0), d.Task.ID).Val() {
			t.Fatalf("in-flight %s left shard 0", d.Task.ID)
		}
	}
	release(t, e, ds)
}

// waitPasses waits until the reshard loops registered on reg made n
// passes in all.
func waitPasses(t *testing.T, reg *prometheus.Registry, n float64) {
	t.Helper()
	testenv.WaitFor(t, 10*time.Second, fmt.Sprint(n, " passes"), func() (bool, string) {
		fams, err := reg.Gather()
		if err != nil {
			return false, err.Error()
		}
		for _, f := range fams {
			if f.GetName() == "hourglass_reshard_passes_total" {
				got := f.GetMetric()[0].GetCounter().GetValue()
				return got >= n, fmt.Sprint(got, " passes")
			}
		}
		return false, "no passes metric"
	})
}

// TestHandOverIsLoggedOncePerChange: while tasks in flight keep a change
// open, every pass of the old home hands its leaving schedules over
// again; the log says so once for the change, and once more when the set
// of schedules changes.
func TestHandOverIsLoggedOncePerChange(t *testing.T) {
	t.Parallel()
	e, _, ds := heldOpen(t)
	var names []string // schedules whose home moves from shard 0 to 1
	for i := 0; len(names) < 3; i++ {
		if n := fmt.Sprintf("sched-%d", i); testenv.ShardOf(n, 2) == 1 {
			names = append(names, n)
		}
	}
	var mu sync.Mutex
	schedules := names[:2]
	var logs testenv.Buffer
	reg := prometheus.NewRegistry()
	m, err := reshard.New(e.Store, reshard.Config{
		Retry: 20 * time.Millisecond, Metrics: reshard.NewMetrics(reg),
		Logger: hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info}),
		Schedules: func() []string {
			mu.Lock()
			defer mu.Unlock()
			return schedules
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	e.Own(owner.Loop{Name: "reshard", Run: m.Run})
	handedOver := func() int { return strings.Count(logs.String(), "handed over to their new home shards") }
	waitPasses(t, reg, 20)
	if n := handedOver(); n != 1 {
		t.Fatalf("logged %d hand-overs in 20 passes, want 1:\n%s", n, logs.String())
	}
	mu.Lock()
	schedules = names
	mu.Unlock()
	waitPasses(t, reg, 40)
	if n := handedOver(); n != 2 {
		t.Fatalf("logged %d hand-overs after a schedule was added, want 2:\n%s", n, logs.String())
	}
	release(t, e, ds)
}

// heldOpen starts a change 1 -> 2 shards on a fresh store that 8 popped
// tasks in shard 0 hold open until release.
func heldOpen(t *testing.T) (*shardtest.Env, context.Context, []shard.Delivery) {
	t.Helper()
	e := shardtest.New(t, shardtest.Options{Shards: 1})
	ctx := testenv.Ctx(t, time.Minute)
	ds := e.Popped(shardtest.Queue, "busy-", 8)
	if _, err := e.Store.BeginResize(ctx, 2); err != nil {
		t.Fatal(err)
	}
	return e, ctx, ds
}

// release acks the tasks of heldOpen and waits for the change to end.
func release(t *testing.T, e *shardtest.Env, ds []shard.Delivery) {
	t.Helper()
	ctx := testenv.Ctx(t, time.Minute)
	for _, d := range ds {
		if err := e.Store.Ack(ctx, d.AckArgs(true)); err != nil {
			t.Fatal(err)
		}
	}
	waitStable(t, e, 1)
}

// TestStaleGenerationOwnerMovesNothingIntoADroppedShard: an owner whose
// store still has the layout of an earlier change (generation 1, 2 -> 4)
// acquires a shard after generation 2 (4 -> 2) has ended. It must not move
// a task that producers placed by 2 shards to its shard among 4, a
// dropped shard nobody owns, scans or pops. Export and Import once did not
// check the shard's marker, and it did.
func TestStaleGenerationOwnerMovesNothingIntoADroppedShard(t *testing.T) {
	t.Parallel()
	e := shardtest.New(t, shardtest.Options{Shards: 2})
	ctx := testenv.Ctx(t, time.Minute)
	m, err := reshard.New(e.Store, reshard.Config{Retry: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	g1, err := e.Store.BeginResize(ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	e.Own(owner.Loop{Name: "reshard", Run: m.Run}) // owners of shards 0, 1
	// The owners of the new shards 2 and 3.
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { stop(); wg.Wait() })
	for sh := 2; sh < 4; sh++ {
		wg.Add(1)
		go func() { defer wg.Done(); _ = m.Run(runCtx, owner.Shard{ID: sh, Epoch: shardtest.Epoch}) }()
	}
	waitStable(t, e, 1)
	if _, err := e.Store.BeginResize(ctx, 2); err != nil {
		t.Fatal(err)
	}
	m.LayoutChanged()
	waitStable(t, e, 2)

	// A producer on generation 2 stores x in shard 1; x's shard among 4 is 3.
	x := testenv.IDs("x-", 1, func(id string) bool { return testenv.ShardOf(id, 2) == 1 && testenv.ShardOf(id, 4) == 3 })[0]
	e.Schedule(shardtest.Queue, time.Hour, x)

	// A replica that missed the end of generation 1 acquires shard 1, and
	// runs until it has either learnt generation 2 or moved x.
	stale := shard.NewStore(e.RDB, g1)
	sm, err := reshard.New(stale, reshard.Config{Retry: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	sctx, sstop := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { defer close(ran); _ = sm.Run(sctx, owner.Shard{ID: 1, Epoch: shardtest.Epoch + 5}) }()
	testenv.WaitFor(t, 10*time.Second, "the stale owner learns generation 2 or moves x", func() (bool, string) {
		l := stale.Layout()
		return l.Gen() >= 2 || e.RDB.HExists(ctx, e.Layout().Tasks(3), x).Val(), fmt.Sprintf("generation %d", l.Gen())
	})
	sstop()
	<-ran

	if e.RDB.HExists(ctx, e.Layout().Tasks(3), x).Val() {
		t.Fatalf("%s was moved into shard 3, which generation 2 dropped: no owner, no worker pops it, lookups miss it (state %q)", x, e.State(x))
	}
}
