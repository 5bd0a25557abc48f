package scan

import (
	"context"
	"fmt"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// idleMover enqueues a task due in an hour on shard 0, runs a mover of
// cfg on the shard, and waits until Redis has confirmed its wake-up
// subscription and the mover has called since (the first call, then the
// confirmation's). It returns the task's id. The task is stored before
// the mover starts, so that its first call sees it without depending on
// the enqueue's wake-up reaching a subscription not in place yet.
func (f *fixture) idleMover(t *testing.T, ctx context.Context, cfg Config) string {
	t.Helper()
	id := f.IDsIn(0, 1, "hand")[0]
	if r := f.Store.Enqueue(ctx, shard.EnqueueArgs{ID: id, Queue: "q", Delay: time.Hour, MaxRetries: -1}); r.Err != nil {
		t.Fatal(r.Err)
	}
	f.runMover(t, 0, 1, cfg)
	ch := f.Store.Layout().WakeChannel(0)
	testenv.WaitFor(t, 10*time.Second, "wake-ups subscribed", func() (bool, string) {
		n := f.RDB.PubSubShardNumSub(ctx, ch).Val()[ch]
		return n == 1 && f.calls(t) >= 2, fmt.Sprint(n, " subscribers, ", f.calls(t), " calls")
	})
	return id
}

// dueByHand makes task id of shard 0 (from idleMover, seen by the
// mover's calls since) due now by hand, without a wake-up: only a
// re-check can find it.
func (f *fixture) dueByHand(t *testing.T, ctx context.Context, id string) {
	t.Helper()
	now := time.Now().UnixMilli()
	if err := f.RDB.ZAddXX(ctx, f.Store.Layout().Delayed(0), redis.Z{Score: float64(now), Member: id}).Err(); err != nil {
		t.Fatal(err)
	}
}

// calls returns how many mover calls the fixture's metrics counted.
func (f *fixture) calls(t *testing.T) uint64 {
	t.Helper()
	var m dto.Metric
	if err := f.met.duration.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// TestConfirmedWakeUpsRecheckAtTheIdleInterval: once Redis has confirmed
// the shard's wake-up subscription, the mover sleeps up to IdleRecheck,
// not SafetyRecheck: a task made due by hand (no wake-up) is not moved
// within 10 safety intervals. The check can only fail by a move that
// comes too early; a loaded machine delays moves, never hastens them.
func TestConfirmedWakeUpsRecheckAtTheIdleInterval(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	const safety = 100 * time.Millisecond
	id := f.idleMover(t, ctx, Config{SafetyRecheck: safety, IdleRecheck: time.Hour})
	f.dueByHand(t, ctx, id)
	time.Sleep(10 * safety)
	if n := f.readyLen(0); n != 0 {
		t.Fatalf("the task made due by hand was moved within %v: the mover re-checks at the safety interval although its wake-ups are confirmed", 10*safety)
	}
}

// TestReconnectRechecksAtOnce: with an idle re-check an hour away, a task
// made due by hand while the wake-up connection is down is moved as soon
// as the subscription is confirmed again: the confirmation wakes the
// mover.
func TestReconnectRechecksAtOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	id := f.idleMover(t, ctx, Config{SafetyRecheck: time.Hour, IdleRecheck: time.Hour})
	f.dueByHand(t, ctx, id)
	if err := f.RDB.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 15*time.Second, "the task moved after the reconnect", func() (bool, string) {
		return f.readyLen(0) == 1, fmt.Sprintf("ready=%d", f.readyLen(0))
	})
}

// TestIdleRecheckReadsTheHeadOnly: once the wake-ups are confirmed, an
// idle re-check that finds the delayed set's head unchanged calls no move
// script (it reads the head, one command), and one that finds a task
// made due by hand (no wake-up) moves it.
func TestIdleRecheckReadsTheHeadOnly(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	const idle = 200 * time.Millisecond
	id := f.idleMover(t, ctx, Config{SafetyRecheck: 100 * time.Millisecond, IdleRecheck: idle})
	before := f.calls(t)
	time.Sleep(10 * idle)
	// At most one more: a confirmation that came after the first call.
	if n := f.calls(t) - before; n > 1 {
		t.Fatalf("%d move calls in %v of idle re-checks every %v: the re-check calls the script although nothing changed", n, 10*idle, idle)
	}
	f.dueByHand(t, ctx, id)
	testenv.WaitFor(t, 10*time.Second, "the task made due by hand moved by an idle re-check", func() (bool, string) {
		return f.readyLen(0) == 1, fmt.Sprintf("ready=%d", f.readyLen(0))
	})
}
