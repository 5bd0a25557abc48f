package scan

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestStagePlan: a mover calls half its prefetch before the next due time
// and moves a whole prefetch ahead; a dense batch (res.Ahead) moves the
// call earlier by stageCost per task and shard, up to shard.MaxStage; a
// call made at once after a full staged batch keeps covering the next due
// task. Without a prefetch, or in a namespace on encoding version 1
// (whose workers may hold a task only 300 ms), nothing is staged and no
// call reaches further than the prefetch.
func TestStagePlan(t *testing.T) {
	t.Parallel()
	f := newFixture(t) // two shards, encoding version 2
	mover := func(prefetch time.Duration, st *shard.Store) *Mover {
		m, err := NewMover(st, Config{Prefetch: prefetch})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	m := mover(50*time.Millisecond, f.Store)
	if !f.Store.StagingAllowed() {
		t.Fatal("a namespace first registered now is on encoding version 2: staging allowed")
	}
	for _, c := range []struct {
		ahead         int
		lead, horizon time.Duration
	}{
		{0, 25 * time.Millisecond, 50 * time.Millisecond},
		{1000, 25*time.Millisecond + 2000*stageCost, 50*time.Millisecond + 2000*stageCost},
		{1_000_000, shard.MaxStage - 25*time.Millisecond, shard.MaxStage},
	} {
		got := m.plan(shard.MoveResult{NextDue: 5000, Now: 1000, Ahead: c.ahead})
		if got.lead != c.lead || got.horizon != c.horizon {
			t.Errorf("ahead %d: plan %+v, want lead %s, horizon %s", c.ahead, got, c.lead, c.horizon)
		}
	}
	// A full batch (LIMIT 512, the default) stopped before tasks due 400
	// ms on, which the staged call's horizon covered: the next call covers
	// them too, however short the lead left of the batch plans. Tasks the
	// call's horizon did not cover, a call that was not full and a
	// promotion keep the plan.
	full := shard.MoveResult{Moved: DefaultLimit, NextDue: 1400, Now: 1000, Ahead: 10}
	staged := stagePlan{lead: 500 * time.Millisecond, horizon: 525 * time.Millisecond}
	short := m.plan(full)
	if p := m.goOn(staged, short, full); p.horizon != 400*time.Millisecond {
		t.Errorf("going on after a full staged batch: horizon %s, want 400ms", p.horizon)
	}
	if p := m.goOn(stagePlan{horizon: 50 * time.Millisecond}, short, full); p != short {
		t.Errorf("going on past the last call's horizon: %+v, want %+v", p, short)
	}
	notFull := full
	notFull.Moved, notFull.Promoted = 3, 1
	if p := m.goOn(staged, short, notFull); p != short {
		t.Errorf("going on after a promotion: %+v, want %+v", p, short)
	}
	if p := mover(0, f.Store).goOn(staged, stagePlan{}, full); p != (stagePlan{}) {
		t.Errorf("no prefetch: going on gives %+v, want the plan unchanged", p)
	}
	if got := mover(0, f.Store).plan(shard.MoveResult{NextDue: 5000, Ahead: 1000}); got != (stagePlan{}) {
		t.Errorf("no prefetch: plan %+v, want none", got)
	}
	l, err := shard.NewLayout("scantest-v1", 2)
	if err != nil {
		t.Fatal(err)
	}
	v1 := shard.NewStore(f.RDB, l)
	v1.SetTaskEncoding(shard.EncodingText)
	if err := v1.RegisterQueues(testenv.Ctx(t, 10*time.Second), map[string]shard.QueuePolicy{"q": {Timeout: time.Second}}); err != nil {
		t.Fatal(err)
	}
	m1 := mover(50*time.Millisecond, v1)
	if got := m1.plan(shard.MoveResult{NextDue: 5000, Ahead: 1_000_000}); got.lead != 25*time.Millisecond || got.horizon != 50*time.Millisecond {
		t.Errorf("encoding version 1: plan %+v, want no staging", got)
	}
	if got := m1.goOn(staged, stagePlan{lead: 25 * time.Millisecond, horizon: 50 * time.Millisecond}, full); got.horizon != 50*time.Millisecond {
		t.Errorf("encoding version 1: going on gives %+v, want the prefetch's horizon", got)
	}
}

// TestMoverStagesADenseBatch: 3,000 tasks due at one instant in one of
// 16 shards are moved well before it (their planned lead is 409 ms:
// 25 ms and 8 µs a task times 16 shards; without staging the first
// would move 25 ms before it), and the staged calls are counted.
func TestMoverStagesADenseBatch(t *testing.T) {
	t.Parallel()
	e := shardtest.New(t, shardtest.Options{Namespace: "stagetest", Shards: 16, Queues: map[string]shard.QueuePolicy{"q": {Timeout: time.Second}}})
	f := &fixture{Env: e, met: NewMetrics(prometheus.NewRegistry())}
	ctx := testenv.Ctx(t, 60*time.Second)
	const sh, n = 0, 3000
	due := time.Now().Add(3 * time.Second).Truncate(time.Millisecond)
	ids := f.IDsIn(sh, n, "dense")
	for i := 0; i < n; i += 1000 {
		args := make([]shard.EnqueueArgs, 0, 1000)
		for _, id := range ids[i:min(i+1000, n)] {
			args = append(args, shard.EnqueueArgs{ID: id, Queue: "q", Due: due})
		}
		for _, r := range f.Store.EnqueueBatch(ctx, args) {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
	}
	if time.Until(due) < time.Second {
		t.Skip("enqueueing took too long to leave the mover time to stage")
	}
	f.runMover(t, sh, 1, Config{Prefetch: 50 * time.Millisecond, SafetyRecheck: time.Hour})
	var first time.Time // Redis's time when the first staged task was seen ready
	testenv.WaitFor(t, 10*time.Second, "the batch moved", func() (bool, string) {
		l := f.readyLen(sh)
		if l > 0 && first.IsZero() {
			tm, err := f.RDB.Time(context.Background()).Result()
			if err != nil {
				return false, err.Error()
			}
			first = tm
		}
		return l == n, fmt.Sprintf("%d of %d ready", l, n)
	})
	if ahead := due.Sub(first); ahead < 100*time.Millisecond {
		t.Errorf("the first task of the batch was ready %s before its due time, want at least 100ms (staged)", ahead)
	}
	if got := testutil.ToFloat64(f.met.staged.WithLabelValues("0")); got < 1 {
		t.Errorf("hourglass_scan_staged_total{shard=0} = %v, want the staged calls counted", got)
	}
}
