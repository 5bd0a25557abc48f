package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// popped makes n tasks ready and pops them, returning one AckArgs each
// for a delivery run before its lease (acks must follow within
// shard.UnleasedGrace, or recovery takes the tasks back).
func (e *env) popped(prefix string, n int) []shard.AckArgs {
	e.t.Helper()
	var acks []shard.AckArgs
	for _, d := range e.Popped("q", prefix, n) {
		acks = append(acks, d.AckArgs(true))
	}
	return acks
}

// queued waits until k's loop has taken every ack sent so far.
func queued(t *testing.T, k *acker) {
	t.Helper()
	testenv.WaitFor(t, 5*time.Second, "acks taken by the acker's loop", func() (bool, string) {
		return len(k.ch) == 0, fmt.Sprint(len(k.ch), " waiting")
	})
}

// ackResult waits up to 10 s for an ack's result and fails on an error.
func ackResult(t *testing.T, what string, ch <-chan error) {
	t.Helper()
	select {
	case err := <-ch:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no result after 10 s", what)
	}
}

// TestAckLingerBatches: an ack waits for later ones and they settle
// together; none returns before the last was sent.
func TestAckLingerBatches(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shard.QueuePolicy{MaxRetries: 3, Timeout: 30 * time.Second})
	acks := e.popped("l", 3)
	k := newAcker(e.Store, 300*time.Millisecond)
	var mu sync.Mutex
	var batches []int
	k.sent = func(n int) { mu.Lock(); batches = append(batches, n); mu.Unlock() }
	k.start()
	defer k.stop()
	var res []<-chan error
	for _, a := range acks {
		res = append(res, k.submit(context.Background(), a, false))
		queued(t, k)
		select {
		case err := <-res[0]:
			t.Fatalf("first ack returned (%v) before ack %d of %d was sent: it did not linger", err, len(res), len(acks))
		default:
		}
	}
	for i, ch := range res {
		ackResult(t, fmt.Sprintf("ack %d", i), ch)
	}
	e.Gone(acks[0].ID, acks[1].ID, acks[2].ID)
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(batches, []int{3}) {
		t.Fatalf("batches sent %v, want one of 3", batches)
	}
}

// TestAckLingerUrgentAndStop: an urgent ack sends the lingering batch at
// once, and stop sends what lingers; neither waits out the linger.
func TestAckLingerUrgentAndStop(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shard.QueuePolicy{MaxRetries: 3, Timeout: 30 * time.Second})
	acks := e.popped("u", 3)
	k := newAcker(e.Store, time.Hour)
	k.start()
	stopped := false
	defer func() {
		if !stopped {
			k.stop()
		}
	}()
	wait := func(what string, ch <-chan error) { t.Helper(); ackResult(t, what+" (the linger is an hour)", ch) }
	lazy := k.submit(context.Background(), acks[0], false)
	queued(t, k)
	urgent := k.submit(context.Background(), acks[1], true)
	wait("urgent ack", urgent)
	wait("ack lingering before the urgent one", lazy)
	e.Gone(acks[0].ID, acks[1].ID)

	last := k.submit(context.Background(), acks[2], false)
	queued(t, k)
	k.stop()
	stopped = true
	wait("ack lingering at stop", last)
	e.Gone(acks[2].ID)
}

// TestAckLingerBounds: Config.AckLinger below 0 or above MaxAckLinger is
// refused; 0 sends at once.
func TestAckLingerBounds(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	if _, err := New(rdb, Config{AckLinger: MaxAckLinger + time.Millisecond}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("AckLinger above the bound: %v", err)
	}
	if _, err := New(rdb, Config{AckLinger: -time.Millisecond}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("negative AckLinger: %v", err)
	}
	for l, want := range map[time.Duration]time.Duration{NoAckLinger: 0, DefaultAckLinger: DefaultAckLinger, MaxAckLinger: MaxAckLinger} {
		w, err := New(rdb, Config{AckLinger: l})
		if err != nil {
			t.Fatalf("AckLinger %s: %v", l, err)
		}
		if w.deps.acks.linger != want {
			t.Fatalf("AckLinger %s: linger %s, want %s", l, w.deps.acks.linger, want)
		}
	}
}
