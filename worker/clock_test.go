package worker

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestClockKeepsTheBetterReading: a held task whose server's reading was
// last checked more than ClockReadAge ago reads the clock again, and the
// reading that holds the task for less is kept: a new one over an old one
// whose reply took 50 ms, and an old one whose reply was instant over any
// new one (which then only counts as a check).
func TestClockKeepsTheBetterReading(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shard.QueuePolicy{MaxRetries: 3, Timeout: 30 * time.Second})
	c := newRedisClock(e.Store, time.Now, hclog.NewNullLogger())
	ctx := testenv.Ctx(t, 10*time.Second)
	stale := time.Now().Add(-2 * shard.ClockReadAge)
	for _, tc := range []struct {
		name    string
		lag     time.Duration // how far Redis's clock in the old reading trails its reply
		keepOld bool
	}{
		// Further behind than any read that succeeds can be: a read
		// slower than clockReadTimeout fails (and is tried again), so
		// the new reading wins unless the reader stalls for a second
		// between the reply and its reading of its own clock.
		{"slow old reading", clockReadTimeout + time.Second, false},
		// Redis's clock 10 ms ahead of the reply: impossible on one host,
		// so no real reading can beat it.
		{"instant old reading", -10 * time.Millisecond, true},
	} {
		old := &shard.ClockReading{Sent: stale, Received: stale, Redis: stale.Add(-tc.lag)}
		src := c.source(0)
		var got *shard.ClockReading
		// A read that fails (over clockReadTimeout on a loaded machine)
		// leaves the reading as it was: try again.
		testenv.WaitFor(t, 10*time.Second, tc.name+": a read of the clock", func() (bool, string) {
			src.reading.Store(old)
			src.mu.Lock()
			src.failedAt = time.Time{}
			src.mu.Unlock()
			c.startAt(ctx, 0, time.Now().Add(100*time.Millisecond))
			got = src.reading.Load()
			return got != old, "every read failed"
		})
		switch {
		case tc.keepOld && (got.Redis != old.Redis || got.Checked.Before(old.Received.Add(shard.ClockReadAge))):
			t.Errorf("%s: kept %+v, want the old reading marked as checked now", tc.name, got)
		case !tc.keepOld && got.Redis == old.Redis:
			t.Errorf("%s: kept the old reading, want the new one", tc.name)
		}
	}
}

// scriptCalls counts the script calls a client sends (EVALSHA or EVAL),
// answered or not.
type scriptCalls struct{ n atomic.Int64 }

func (h *scriptCalls) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *scriptCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *scriptCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestClockReadFailureIsNotRetriedAtOnce: when the server's clock cannot
// be read, deliveries fall back to the worker's clock without reading
// again for clockRetryAfter, so that a slow or unreachable Redis does not
// make every delivery wait out a read of its own (they queue on the
// source's lock, and an unleased task must be leased within a second of
// its pop); after that, the next delivery reads again.
func TestClockReadFailureIsNotRetriedAtOnce(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1}) // refuses at once
	t.Cleanup(func() { rdb.Close() })
	calls := &scriptCalls{}
	rdb.AddHook(calls)
	l, err := shard.NewLayout("clock", 1)
	if err != nil {
		t.Fatal(err)
	}
	c := newRedisClock(shard.NewStore(rdb, l), time.Now, hclog.NewNullLogger())
	ctx := testenv.Ctx(t, 10*time.Second)
	due := time.Now().Add(time.Hour)
	for i := range 3 {
		if at := c.startAt(ctx, 0, due); !at.Equal(due) {
			t.Fatalf("start %d: %s, want the due time on the worker's clock", i, at)
		}
	}
	if n := calls.n.Load(); n != 1 {
		t.Fatalf("%d reads of the clock, want 1 within clockRetryAfter of the failure", n)
	}
	src := c.source(0)
	src.mu.Lock()
	src.failedAt = src.failedAt.Add(-clockRetryAfter)
	src.mu.Unlock()
	c.startAt(ctx, 0, due)
	if n := calls.n.Load(); n != 2 {
		t.Fatalf("%d reads of the clock, want 2 once clockRetryAfter has passed", n)
	}
}
