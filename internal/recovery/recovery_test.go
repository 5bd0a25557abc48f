package recovery

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
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

// newFixture is a one-shard Redis with queue "q": one retry, a fast
// backoff.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	e := shardtest.New(t, shardtest.Options{Shards: 1, Queues: map[string]shard.QueuePolicy{
		"q": {MaxRetries: 1, Timeout: time.Second, Backoff: shard.Backoff{Base: 10 * time.Millisecond, Cap: 20 * time.Millisecond, Factor: 2}},
	}})
	return &fixture{Env: e, met: NewMetrics(prometheus.NewRegistry())}
}

// run starts a recovery loop as the owner of shard 0 and returns the
// shard's Ready channel, on which the test pokes it as the mover would.
func (f *fixture) run(t *testing.T, cfg Config) chan struct{} {
	t.Helper()
	cfg.Metrics = f.met
	r, err := New(f.Store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f.Own(owner.Loop{Name: "recovery", Run: r.Run})[0].Ready
}

func (f *fixture) state(id string) (shard.Info, string) {
	info, err := f.Lookup(id)
	return info, fmt.Sprintf("%s attempts=%d %v", info.State, info.Task.Attempts, err)
}

// TestExpiredLeasesRetryThenBury: a lease that lapses sends the task back
// with attempts+1, then to the dead-letter set once retries are spent,
// with reason "lease expired" and the last error kept.
func TestExpiredLeasesRetryThenBury(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	// The loop learns a new lease's deadline on its next check of an
	// active shard; the poke ends the idle sleep.
	poke := f.run(t, Config{SafetyRecheck: time.Hour, StrandCheck: 200 * time.Millisecond})
	f.Ready("q", "t1")
	poke <- struct{}{}
	keys := f.Store.Layout().ReadyKeys([]string{"q"})
	claim := func() shard.Delivery {
		_, ids, err := f.Store.Pop(ctx, keys, 1, time.Second)
		if err != nil || len(ids) != 1 {
			t.Fatalf("pop: %v %v", ids, err)
		}
		ds, err := f.Store.Claim(ctx, 0, "q", ids, 100*time.Millisecond)
		if err != nil || len(ds) != 1 {
			t.Fatalf("claim: %v %v", ds, err)
		}
		return ds[0]
	}
	d := claim()
	testenv.WaitFor(t, 10*time.Second, "expired lease rescheduled", func() (bool, string) {
		info, s := f.state("t1")
		return info.State == "scheduled" && info.Task.Attempts == 1, s
	})
	if err := f.Store.Ack(ctx, shard.AckArgs{Shard: 0, ID: "t1", Token: d.Token}); !errors.Is(err, shard.ErrStaleToken) {
		t.Fatalf("late ack: %v", err)
	}
	testenv.WaitFor(t, 5*time.Second, "retry moved", func() (bool, string) {
		_, err := f.Store.Move(ctx, 0, 1, 100)
		info, s := f.state("t1")
		return err == nil && info.State == "ready", s
	})
	poke <- struct{}{}
	claim()
	testenv.WaitFor(t, 10*time.Second, "second expiry buries", func() (bool, string) {
		info, s := f.state("t1")
		return info.State == "dead" && strings.Contains(info.DeadInfo, "lease expired"), s + " " + info.DeadInfo
	})
	testenv.WaitFor(t, 5*time.Second, "expiry metrics", func() (bool, string) {
		r, b := testutil.ToFloat64(f.met.expired.WithLabelValues("retried")), testutil.ToFloat64(f.met.expired.WithLabelValues("buried"))
		return r == 1 && b == 1, fmt.Sprintf("retried %v buried %v", r, b)
	})
}

// TestStrandedPopIsRedelivered: an id popped and neither settled nor
// leased counts a failed attempt and is retried, no sooner than
// shard.UnleasedGrace after the check that first saw it.
func TestStrandedPopIsRedelivered(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	f.Ready("q", "s1")
	_, ids, err := f.Store.Pop(ctx, f.Store.Layout().ReadyKeys([]string{"q"}), 1, time.Second)
	if err != nil || len(ids) != 1 {
		t.Fatal(ids, err)
	}
	// The popping worker "crashed": nobody claims s1.
	f.run(t, Config{StrandCheck: 100 * time.Millisecond, SafetyRecheck: time.Hour})
	start := time.Now()
	testenv.WaitFor(t, 10*time.Second, "stranded id rescheduled as a failed attempt", func() (bool, string) {
		info, s := f.state("s1")
		return info.State == "scheduled" && info.Task.Attempts == 1, s
	})
	if waited := time.Since(start); waited < shard.UnleasedGrace {
		t.Fatalf("stranded id taken back after %s, before the grace of %s", waited, shard.UnleasedGrace)
	}
	testenv.WaitFor(t, 5*time.Second, "stranded metric", func() (bool, string) {
		n := testutil.ToFloat64(f.met.redelivered)
		return n >= 1, fmt.Sprint(n)
	})
}

func TestStaleEpochStops(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := testenv.Ctx(t, 10*time.Second)
	if _, err := f.Store.Move(ctx, 0, 5, 1); err != nil {
		t.Fatal(err)
	}
	r, _ := New(f.Store, Config{Metrics: f.met})
	if err := r.Run(ctx, owner.Shard{ID: 0, Epoch: 4}); !errors.Is(err, shard.ErrStaleEpoch) {
		t.Fatalf("Run = %v", err)
	}
	if n := testutil.ToFloat64(f.met.stale); n != 1 {
		t.Fatalf("stale metric %v", n)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []Config{{Limit: -1}, {StrandCheck: -1}, {DeadMaxSize: -1}, {DeadMaxAge: -time.Second}} {
		if _, err := New(nil, c); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("New(%+v) = %v", c, err)
		}
	}
}

func TestIdleRecheckDefaults(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  Config
		want time.Duration
	}{
		{Config{}, DefaultIdleRecheck},
		{Config{IdleRecheck: time.Hour}, time.Hour},
		{Config{SafetyRecheck: time.Hour, IdleRecheck: time.Minute}, time.Hour}, // raised to the safety re-check
	} {
		r, err := New(nil, c.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if r.cfg.IdleRecheck != c.want {
			t.Fatalf("%+v: idle recheck %s, want %s", c.cfg, r.cfg.IdleRecheck, c.want)
		}
	}
}
