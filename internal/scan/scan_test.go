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
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type fixture struct {
	store *shard.Store
	rdb   *redis.Client
	redis *testenv.Redis
	met   *Metrics
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	r := testenv.StartRedis(t)
	rdb := r.Client(t)
	l, _ := shard.NewLayout("scantest", 2)
	st := shard.NewStore(rdb, l)
	if err := st.RegisterQueues(context.Background(), map[string]shard.QueuePolicy{"q": {Timeout: time.Second, MaxPayload: 1024}}); err != nil {
		t.Fatal(err)
	}
	return &fixture{store: st, rdb: rdb, redis: r, met: NewMetrics(prometheus.NewRegistry())}
}

// idsIn returns n task ids that hash to shard sh.
func (f *fixture) idsIn(sh, n int, prefix string) []string {
	var ids []string
	for i := 0; len(ids) < n; i++ {
		if id := fmt.Sprintf("%s%d", prefix, i); f.store.Layout().ShardOf(id) == sh {
			ids = append(ids, id)
		}
	}
	return ids
}

func (f *fixture) readyLen(t *testing.T, sh int) int64 {
	return f.rdb.LLen(context.Background(), f.store.Layout().Ready(sh, "q")).Val()
}

// runMover runs a mover on shard sh in the background and returns a stop
// function that waits for it and returns its error.
func (f *fixture) runMover(t *testing.T, sh int, epoch int64, cfg Config) func() error {
	t.Helper()
	cfg.Metrics = f.met
	m, err := NewMover(f.store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := NewWaker(f.rdb, nil, f.met)
	wake, unsub, err := w.Subscribe(ctx, f.store.Layout().WakeChannel(sh))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var runErr error
	wg.Add(2)
	go func() { defer wg.Done(); _ = w.Run(ctx) }()
	go func() { defer wg.Done(); runErr = m.Run(ctx, sh, epoch, wake, nil) }()
	stop := func() error {
		cancel()
		unsub()
		wg.Wait()
		return runErr
	}
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
		e, _ := f.store.StoredEpoch(context.Background(), sh)
		return e == 1, "epoch not stored yet"
	})
}

func TestWakeUpMovesWithoutPolling(t *testing.T) {
	f := newFixture(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	// A safety re-check of an hour: only a wake-up can get the task moved.
	f.runIdleMover(t, 0)
	id := f.idsIn(0, 1, "wake")[0]
	if r := f.store.Enqueue(ctx, shard.EnqueueArgs{ID: id, Queue: "q", Delay: 200 * time.Millisecond, MaxRetries: -1}); r.Err != nil {
		t.Fatal(r.Err)
	}
	testenv.WaitFor(t, 5*time.Second, "woken mover moves the task", func() (bool, string) {
		return f.readyLen(t, 0) == 1, fmt.Sprintf("ready=%d", f.readyLen(t, 0))
	})
	if n := testutil.ToFloat64(f.met.wakeups); n < 1 {
		t.Fatalf("wakeups metric = %v", n)
	}
}

func TestSleepsUntilNextDue(t *testing.T) {
	f := newFixture(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	ids := f.idsIn(1, 2, "due")
	// The first task is the head when the mover starts; the second is later
	// and publishes no wake-up, so the mover must time its own sleep.
	for i, id := range ids {
		if r := f.store.Enqueue(ctx, shard.EnqueueArgs{ID: id, Queue: "q", Delay: time.Duration(300*(i+1)) * time.Millisecond, MaxRetries: -1}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	f.runMover(t, 1, 1, Config{SafetyRecheck: time.Hour})
	testenv.WaitFor(t, 5*time.Second, "both tasks moved on time", func() (bool, string) {
		return f.readyLen(t, 1) == 2, fmt.Sprintf("ready=%d", f.readyLen(t, 1))
	})
}

// TestFarTierPromotedWithoutPolling: a task enqueued into the far tier
// wakes the owner for its bucket's promotion time, is promoted and then
// moved at its due time, with no safety re-check involved.
func TestFarTierPromotedWithoutPolling(t *testing.T) {
	f := newFixture(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	if err := f.store.SetFarTier(ctx, shard.FarTier{Bucket: time.Second, Lead: time.Second}); err != nil {
		t.Fatal(err)
	}
	f.runIdleMover(t, 0)
	id := f.idsIn(0, 1, "far")[0]
	if r := f.store.Enqueue(ctx, shard.EnqueueArgs{ID: id, Queue: "q", Delay: 3500 * time.Millisecond, MaxRetries: -1}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if n := f.rdb.ZCard(ctx, f.store.Layout().Far(0)).Val(); n != 1 {
		t.Fatalf("far tier holds %d buckets, want 1", n)
	}
	testenv.WaitFor(t, 10*time.Second, "far-tier task promoted and moved", func() (bool, string) {
		return f.readyLen(t, 0) == 1, fmt.Sprintf("ready=%d", f.readyLen(t, 0))
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
	f := newFixture(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	f.runMover(t, 0, 1, Config{SafetyRecheck: time.Hour, Prefetch: 200 * time.Millisecond})
	testenv.WaitFor(t, 5*time.Second, "mover's first (empty) scan", func() (bool, string) {
		e, _ := f.store.StoredEpoch(ctx, 0)
		return e == 1, "epoch not stored yet"
	})
	var batch []shard.EnqueueArgs
	for i, id := range f.idsIn(0, 20, "ahead") {
		d := 600*time.Millisecond + time.Duration(i)*10*time.Millisecond
		batch = append(batch, shard.EnqueueArgs{ID: id, Queue: "q", Delay: d, MaxRetries: -1})
	}
	for _, r := range f.store.EnqueueBatch(ctx, batch) { // one call: one wake-up
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	testenv.WaitFor(t, 10*time.Second, "all 20 tasks moved", func() (bool, string) {
		return f.readyLen(t, 0) == 20, fmt.Sprintf("ready=%d", f.readyLen(t, 0))
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
	f := newFixture(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	var batch []shard.EnqueueArgs
	for _, id := range f.idsIn(0, 2000, "bulk") {
		batch = append(batch, shard.EnqueueArgs{ID: id, Queue: "q", MaxRetries: -1})
	}
	for _, r := range f.store.EnqueueBatch(ctx, batch) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	f.runMover(t, 0, 1, Config{Limit: 100, SafetyRecheck: time.Hour})
	testenv.WaitFor(t, 10*time.Second, "2000 tasks moved in batches of 100", func() (bool, string) {
		return f.readyLen(t, 0) == 2000, fmt.Sprintf("ready=%d", f.readyLen(t, 0))
	})
	if n := testutil.CollectAndCount(f.met.batch); n != 1 {
		t.Fatalf("batch histogram not collected")
	}
}

func TestStaleEpochStopsMover(t *testing.T) {
	f := newFixture(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	if _, err := f.store.Move(ctx, 0, 10, 1); err != nil { // a newer owner ran
		t.Fatal(err)
	}
	m, _ := NewMover(f.store, Config{Metrics: f.met})
	err := m.Run(ctx, 0, 9, nil, nil)
	if !errors.Is(err, shard.ErrStaleEpoch) {
		t.Fatalf("Run = %v, want ErrStaleEpoch", err)
	}
	if n := testutil.ToFloat64(f.met.stale.WithLabelValues("0")); n != 1 {
		t.Fatalf("stale metric = %v, want 1", n)
	}
	if n, _ := f.store.StaleEpochRejections(ctx, 0); n != 1 {
		t.Fatalf("stale counter in Redis = %d, want 1", n)
	}
}

func TestSurvivesRedisRestart(t *testing.T) {
	f := newFixture(t)
	ctx := testenv.Ctx(t, 60*time.Second)
	f.runMover(t, 0, 1, Config{SafetyRecheck: time.Hour})
	testenv.WaitFor(t, 5*time.Second, "first scan", func() (bool, string) {
		e, _ := f.store.StoredEpoch(ctx, 0)
		return e == 1, ""
	})
	f.redis.Kill()
	f.redis.Restart() // empty again: no persistence in this test
	if err := f.store.RegisterQueues(ctx, map[string]shard.QueuePolicy{"q": {Timeout: time.Second, MaxPayload: 1024}}); err != nil {
		t.Fatal(err)
	}
	// The waker re-subscribes; an enqueue's wake-up must reach the mover.
	id := f.idsIn(0, 1, "after")[0]
	testenv.WaitFor(t, 15*time.Second, "task enqueued after restart is moved", func() (bool, string) {
		f.store.Enqueue(ctx, shard.EnqueueArgs{ID: id, Queue: "q", MaxRetries: -1})
		return f.readyLen(t, 0) == 1, fmt.Sprintf("ready=%d", f.readyLen(t, 0))
	})
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{{Limit: -1}, {SafetyRecheck: -time.Second}, {Prefetch: -time.Millisecond}, {Prefetch: shard.MaxPrefetch + time.Millisecond}, {Prefetch: 1500 * time.Microsecond}} {
		if _, err := NewMover(nil, c); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("NewMover(%+v) = %v", c, err)
		}
	}
}
