package scan

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/hourglass-sched/hourglass/internal/owner"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type fixture struct {
	*shardtest.Env
	met *Metrics
}

// newFixture is a two-shard Redis with queue "q".
func newFixture(t *testing.T) *fixture {
	t.Helper()
	e := shardtest.New(t, shardtest.Options{Namespace: "scantest", Queues: map[string]shard.QueuePolicy{"q": {Timeout: time.Second}}})
	return &fixture{Env: e, met: NewMetrics(prometheus.NewRegistry())}
}

func (f *fixture) readyLen(sh int) int64 { return f.ReadyLen(sh, "q") }

// runMover runs a mover on shard sh with its wake-ups on a Waker, in the
// background, and returns a stop function that waits for it and returns
// its error.
func (f *fixture) runMover(t *testing.T, sh int, epoch int64, cfg Config) func() error {
	t.Helper()
	cfg.Metrics = f.met
	m, err := NewMover(f.Store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := NewWaker(f.RDB, nil, f.met)
	wake, unsub, subscribed := w.Subscribe(ctx, f.Layout().WakeChannel(sh))
	var wg sync.WaitGroup
	var runErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		runErr = m.Run(ctx, owner.Shard{ID: sh, Epoch: epoch, Wake: wake, Subscribed: subscribed})
	}()
	stop := sync.OnceValue(func() error {
		cancel()
		wg.Wait()
		unsub()
		w.Close()
		return runErr
	})
	t.Cleanup(func() { _ = stop() })
	return stop
}

// runIdleMover runs a mover on shard sh with epoch 1 and a safety
// re-check of an hour, and waits for its first (empty) scan: from then on
// only a wake-up or a due member gets it to scan again.
func (f *fixture) runIdleMover(t *testing.T, sh int) {
	t.Helper()
	f.runMover(t, sh, 1, Config{SafetyRecheck: time.Hour})
	testenv.WaitFor(t, 5*time.Second, "mover's first (empty) scan", func() (bool, string) {
		e, _ := f.Store.StoredEpoch(context.Background(), sh)
		return e == 1, "epoch not stored yet"
	})
}

func TestWakeUpMovesWithoutPolling(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	// A safety re-check of an hour: only a wake-up can get the task moved.
	f.runIdleMover(t, 0)
	id := f.IDsIn(0, 1, "wake")[0]
	if r := f.Store.Enqueue(ctx, shard.EnqueueArgs{ID: id, Queue: "q", Delay: 200 * time.Millisecond, MaxRetries: -1}); r.Err != nil {
		t.Fatal(r.Err)
	}
	testenv.WaitFor(t, 5*time.Second, "woken mover moves the task", func() (bool, string) {
		return f.readyLen(0) == 1, fmt.Sprintf("ready=%d", f.readyLen(0))
	})
	if n := testutil.ToFloat64(f.met.wakeups); n < 1 {
		t.Fatalf("wakeups metric = %v", n)
	}
}

func TestSleepsUntilNextDue(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	ids := f.IDsIn(1, 2, "due")
	// The first task is the head when the mover starts; the second is later
	// and publishes no wake-up, so the mover must time its own sleep.
	for i, id := range ids {
		if r := f.Store.Enqueue(ctx, shard.EnqueueArgs{ID: id, Queue: "q", Delay: time.Duration(300*(i+1)) * time.Millisecond, MaxRetries: -1}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	f.runMover(t, 1, 1, Config{SafetyRecheck: time.Hour})
	testenv.WaitFor(t, 5*time.Second, "both tasks moved on time", func() (bool, string) {
		return f.readyLen(1) == 2, fmt.Sprintf("ready=%d", f.readyLen(1))
	})
}

// TestFarTierPromotedWithoutPolling: a task enqueued into the far tier
// wakes the owner for its bucket's promotion time, is promoted and then
// moved at its due time, with no safety re-check involved.
func TestFarTierPromotedWithoutPolling(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	if err := f.Store.SetFarTier(ctx, shard.FarTier{Bucket: time.Second, Lead: time.Second}); err != nil {
		t.Fatal(err)
	}
	f.runIdleMover(t, 0)
	id := f.IDsIn(0, 1, "far")[0]
	if r := f.Store.Enqueue(ctx, shard.EnqueueArgs{ID: id, Queue: "q", Delay: 3500 * time.Millisecond, MaxRetries: -1}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if n := f.RDB.ZCard(ctx, f.Store.Layout().Far(0)).Val(); n != 1 {
		t.Fatalf("far tier holds %d buckets, want 1", n)
	}
	testenv.WaitFor(t, 10*time.Second, "far-tier task promoted and moved", func() (bool, string) {
		return f.readyLen(0) == 1, fmt.Sprintf("ready=%d", f.readyLen(0))
	})
	if n := testutil.ToFloat64(f.met.promoted.WithLabelValues("0")); n != 1 {
		t.Fatalf("promoted metric = %v, want 1", n)
	}
}

// TestPrefetchBatchesAhead: with a prefetch of 200 ms the mover moves
// tasks spread over 190 ms in two calls, each moving what is due within
// the prefetch; without one it would need a call per task (20). Nor does
// it spin while it waits for them: the calls that moved nothing (the first
// scan, wake-ups) are counted too.
func TestPrefetchBatchesAhead(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	f.runMover(t, 0, 1, Config{SafetyRecheck: time.Hour, Prefetch: 200 * time.Millisecond})
	testenv.WaitFor(t, 5*time.Second, "mover's first (empty) scan", func() (bool, string) {
		e, _ := f.Store.StoredEpoch(ctx, 0)
		return e == 1, "epoch not stored yet"
	})
	var batch []shard.EnqueueArgs
	for i, id := range f.IDsIn(0, 20, "ahead") {
		d := 600*time.Millisecond + time.Duration(i)*10*time.Millisecond
		batch = append(batch, shard.EnqueueArgs{ID: id, Queue: "q", Delay: d, MaxRetries: -1})
	}
	for _, r := range f.Store.EnqueueBatch(ctx, batch) { // one call: one wake-up
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	testenv.WaitFor(t, 10*time.Second, "all 20 tasks moved", func() (bool, string) {
		return f.readyLen(0) == 20, fmt.Sprintf("ready=%d", f.readyLen(0))
	})
	var m dto.Metric
	if err := f.met.batch.Write(&m); err != nil {
		t.Fatal(err)
	}
	h := m.GetHistogram()
	empty := h.GetBucket()[0].GetCumulativeCount() // upper bound 0: calls that moved nothing
	if h.GetBucket()[0].GetUpperBound() != 0 {
		t.Fatal("first bucket of hourglass_scan_moved is not 0")
	}
	moving := h.GetSampleCount() - empty
	t.Logf("mover calls: %d that moved tasks, %d that moved none", moving, empty)
	if moving > 3 || empty > 6 {
		t.Fatalf("%d calls moved the 20 tasks and %d moved none; want at most 3 and 6", moving, empty)
	}
}

func TestFullBatchesLoop(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	var batch []shard.EnqueueArgs
	for _, id := range f.IDsIn(0, 2000, "bulk") {
		batch = append(batch, shard.EnqueueArgs{ID: id, Queue: "q", MaxRetries: -1})
	}
	for _, r := range f.Store.EnqueueBatch(ctx, batch) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	f.runMover(t, 0, 1, Config{Limit: 100, SafetyRecheck: time.Hour})
	testenv.WaitFor(t, 10*time.Second, "2000 tasks moved in batches of 100", func() (bool, string) {
		return f.readyLen(0) == 2000, fmt.Sprintf("ready=%d", f.readyLen(0))
	})
	// 2000 moved in all, at least 20 calls of a full batch (64 < n <= 256):
	// one call moving everything would land in (1024, 4096].
	var m dto.Metric
	if err := f.met.batch.Write(&m); err != nil {
		t.Fatal(err)
	}
	h := m.GetHistogram()
	full := bucketCount(t, h, 256) - bucketCount(t, h, 64)
	if h.GetSampleSum() != 2000 || full < 20 {
		t.Fatalf("batch histogram: %v moved, %d calls moved 65..256 tasks; want 2000 moved, at least 20 full batches of 100", h.GetSampleSum(), full)
	}
}

func TestStaleEpochStopsMover(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	if _, err := f.Store.Move(ctx, 0, 10, 1); err != nil { // a newer owner ran
		t.Fatal(err)
	}
	m, _ := NewMover(f.Store, Config{Metrics: f.met})
	err := m.Run(ctx, owner.Shard{ID: 0, Epoch: 9})
	if !errors.Is(err, shard.ErrStaleEpoch) {
		t.Fatalf("Run = %v, want ErrStaleEpoch", err)
	}
	if n := testutil.ToFloat64(f.met.stale.WithLabelValues("0")); n != 1 {
		t.Fatalf("stale metric = %v, want 1", n)
	}
	if n, _ := f.Store.StaleEpochRejections(ctx, 0); n != 1 {
		t.Fatalf("stale counter in Redis = %d, want 1", n)
	}
}

func TestSurvivesRedisRestart(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := testenv.Ctx(t, 60*time.Second)
	f.runMover(t, 0, 1, Config{SafetyRecheck: time.Hour})
	testenv.WaitFor(t, 5*time.Second, "first scan", func() (bool, string) {
		e, _ := f.Store.StoredEpoch(ctx, 0)
		return e == 1, ""
	})
	f.Redis.Kill()
	f.Redis.Restart() // empty again: no persistence in this test
	f.Register(map[string]shard.QueuePolicy{"q": {Timeout: time.Second}})
	// The waker re-subscribes; an enqueue's wake-up must reach the mover.
	id := f.IDsIn(0, 1, "after")[0]
	testenv.WaitFor(t, 15*time.Second, "task enqueued after restart is moved", func() (bool, string) {
		f.Store.Enqueue(ctx, shard.EnqueueArgs{ID: id, Queue: "q", MaxRetries: -1})
		return f.readyLen(0) == 1, fmt.Sprintf("ready=%d", f.readyLen(0))
	})
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []Config{{Limit: -1}, {SafetyRecheck: -time.Second}, {Prefetch: -time.Millisecond}, {Prefetch: shard.MaxPrefetch + time.Millisecond}, {Prefetch: 1500 * time.Microsecond}} {
		if _, err := NewMover(nil, c); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("NewMover(%+v) = %v", c, err)
		}
	}
}

// bucketCount returns the cumulative count of h's bucket with upper bound
// le; the test fails if h has no such bucket.
func bucketCount(t *testing.T, h *dto.Histogram, le float64) uint64 {
	t.Helper()
	for _, b := range h.GetBucket() {
		if b.GetUpperBound() == le {
			return b.GetCumulativeCount()
		}
	}
	t.Fatalf("histogram has no bucket le=%v", le)
	return 0
}
