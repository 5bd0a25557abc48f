package shardtest

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/hourglass-sched/hourglass/internal/owner"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestSeedersReachTheirStates: each seeder leaves its tasks in the state
// it names, as the store reports it.
func TestSeedersReachTheirStates(t *testing.T) {
	t.Parallel()
	e := New(t, Options{})
	e.Schedule(Queue, time.Hour, "later")
	e.Ready(Queue, "now")
	if s := e.State("later"); s != "scheduled" {
		t.Fatalf("scheduled task is %s", s)
	}
	if s := e.State("now"); s != "ready" {
		t.Fatalf("ready task is %s", s)
	}
	if _, err := e.Store.Cancel(context.Background(), "now"); err != nil { // Popped needs an empty queue
		t.Fatal(err)
	}
	ds := e.Popped(Queue, "pop", 3)
	if len(ds) != 3 {
		t.Fatalf("popped %d deliveries, want 3", len(ds))
	}
	for _, d := range ds {
		if s := e.State(d.Task.ID); s != "active" || !d.Unleased || string(d.Task.Payload) != "p-"+d.Task.ID {
			t.Fatalf("popped %s: state %s, unleased %v, payload %q", d.Task.ID, s, d.Unleased, d.Task.Payload)
		}
		if err := e.Store.Ack(context.Background(), d.AckArgs(true)); err != nil {
			t.Fatal(err)
		}
	}
	e.Gone("pop0", "pop1", "pop2")
	for _, id := range e.Dead(Queue, "dead", 2) {
		info, err := e.Lookup(id)
		if err != nil || info.State != "dead" || !strings.Contains(info.DeadInfo, "shardtest: dead") {
			t.Fatalf("dead %s: %+v %v", id, info, err)
		}
	}
	for _, id := range e.IDsIn(1, 5, "x") {
		if e.Layout().ShardOf(id) != 1 {
			t.Fatalf("IDsIn(1) gave %s of shard %d", id, e.Layout().ShardOf(id))
		}
	}
}

// TestOwnRunsLoopsWithWakeUps: Own runs the loops on every shard with
// Epoch, and an enqueue that becomes a shard's earliest task wakes that
// shard's loop.
func TestOwnRunsLoopsWithWakeUps(t *testing.T) {
	t.Parallel()
	e := New(t, Options{})
	var woken [2]atomic.Int32
	shards := e.Own(owner.Loop{Name: "probe", Run: func(ctx context.Context, s owner.Shard) error {
		if s.Epoch != Epoch {
			t.Errorf("shard %d runs with epoch %d", s.ID, s.Epoch)
		}
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-s.Wake:
				woken[s.ID].Add(1)
			}
		}
	}})
	if len(shards) != 2 {
		t.Fatalf("Own returned %d shards, want 2", len(shards))
	}
	// The subscription's confirmation wakes each loop once; then the
	// enqueue of shard 1's first task publishes a wake-up.
	testenv.WaitFor(t, 10*time.Second, "subscriptions confirmed", func() (bool, string) {
		return woken[0].Load() == 1 && woken[1].Load() == 1, fmt.Sprint(woken[0].Load(), woken[1].Load())
	})
	e.Schedule(Queue, time.Hour, e.IDsIn(1, 1, "w")[0])
	testenv.WaitFor(t, 10*time.Second, "shard 1's loop woken by the enqueue", func() (bool, string) {
		return woken[1].Load() == 2, fmt.Sprint(woken[1].Load())
	})
	if n := woken[0].Load(); n != 1 {
		t.Fatalf("shard 0's loop woken %d times, want only by its confirmation", n)
	}
}
