package owner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/hourglass-sched/hourglass/internal/backoff"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errFenced = errors.New("fenced")

// TestFirstToStopStopsAll: every loop gets the shard and one shared
// Ready channel; when one loop stops with an error, the others' ctx ends,
// Run waits for them and returns the error under the loop's name.
func TestFirstToStopStopsAll(t *testing.T) {
	t.Parallel()
	wake := make(chan struct{})
	var sawReady atomic.Bool
	var stopped atomic.Int32
	relay := Loop{Name: "relay", Run: func(ctx context.Context, s Shard) error {
		s.Ready <- struct{}{} // as the mover pokes recovery
		<-ctx.Done()
		stopped.Add(1)
		return nil
	}}
	fenced := Loop{Name: "fenced", Run: func(ctx context.Context, s Shard) error {
		if s.ID != 3 || s.Epoch != 7 || s.Wake != (<-chan struct{})(wake) {
			t.Errorf("loop got shard %+v", s)
		}
		select {
		case <-s.Ready:
			sawReady.Store(true)
		case <-time.After(10 * time.Second):
			t.Error("no signal on Ready from the other loop")
		}
		return errFenced
	}}
	waiter := Loop{Name: "waiter", Run: func(ctx context.Context, s Shard) error {
		<-ctx.Done()
		stopped.Add(1)
		return nil
	}}
	done := make(chan error, 1)
	go func() {
		done <- Run(context.Background(), Shard{ID: 3, Epoch: 7, Wake: wake}, []Loop{relay, fenced, waiter})
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after a loop stopped")
	}
	if !errors.Is(err, errFenced) || err.Error() != "owner: fenced of shard 3: fenced" {
		t.Fatalf("Run = %v, want the fenced loop's error under its name", err)
	}
	if !sawReady.Load() || stopped.Load() != 2 {
		t.Fatalf("ready seen %v, other loops stopped %d; want true, 2", sawReady.Load(), stopped.Load())
	}
}

// TestCtxEndStopsAll: the owner's ctx ending (shard lost, shutdown) stops
// every loop; Run returns nil when none failed.
func TestCtxEndStopsAll(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{}, 2)
	loop := Loop{Name: "l", Run: func(ctx context.Context, _ Shard) error {
		started <- struct{}{}
		<-ctx.Done()
		return nil
	}}
	done := make(chan error, 1)
	go func() { done <- Run(ctx, Shard{}, []Loop{loop, loop}) }()
	<-started
	<-started
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its ctx ended")
	}
}

// TestRepeatRetriesThenStopsWhenFenced: a failed step is counted, logged
// once and retried after the backoff; a fenced step ends Repeat with its
// error, counted and not logged; a successful step waits as it says (here
// for its wake-up channel only).
func TestRepeatRetriesThenStopsWhenFenced(t *testing.T) {
	t.Parallel()
	var logs testenv.Buffer
	errs, stale := prometheus.NewCounter(prometheus.CounterOpts{Name: "e"}), prometheus.NewCounter(prometheus.CounterOpts{Name: "s"})
	wake := make(chan struct{})
	var calls atomic.Int32
	steps := Steps{
		What: "probe call", Log: hclog.New(&hclog.LoggerOptions{Output: &logs}), Errors: errs, Stale: stale,
		Backoff: backoff.Backoff{Min: time.Millisecond, Max: time.Millisecond},
		Step: func(context.Context) (Wait, error) {
			switch calls.Add(1) {
			case 1, 2:
				return Wait{}, errors.New("redis down")
			case 3:
				return Wait{For: Forever, Wake: wake}, nil
			}
			return Wait{}, fmt.Errorf("move: %w", shard.ErrStaleEpoch)
		},
	}
	done := make(chan error, 1)
	go func() { done <- Repeat(context.Background(), steps) }()
	deadline := time.Now().Add(10 * time.Second)
	for calls.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d steps after 10 s, want 3", calls.Load())
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("Repeat returned %v while its step waited for a wake-up", err)
	default:
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("%d steps before the wake-up, want 3", n)
	}
	wake <- struct{}{}
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Repeat did not return after a fenced step")
	}
	if !errors.Is(err, shard.ErrStaleEpoch) {
		t.Fatalf("Repeat = %v, want the fenced step's error", err)
	}
	if e, s := testutil.ToFloat64(errs), testutil.ToFloat64(stale); e != 2 || s != 1 {
		t.Fatalf("counted %v failed and %v fenced steps, want 2 and 1", e, s)
	}
	out := logs.String()
	if n := strings.Count(out, "probe call failed; retrying"); n != 2 || strings.Contains(out, "stale") {
		t.Fatalf("want the two failures logged and the fencing not, got:\n%s", out)
	}
}

// TestRepeatEndsWithCtx: Repeat returns nil when its ctx ends, also in
// the middle of a step that fails because of it.
func TestRepeatEndsWithCtx(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Repeat(ctx, Steps{Step: func(ctx context.Context) (Wait, error) {
			cancel()
			<-ctx.Done()
			return Wait{}, ctx.Err()
		}})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Repeat = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Repeat did not return after its ctx ended")
	}
}

// TestRepeatStepAllocatesNothing: Repeat allocates nothing per step (the
// mover, on the hot path, runs a step per batch): 1,001 steps cost what
// one does. Not parallel: allocations are counted process-wide.
func TestRepeatStepAllocatesNothing(t *testing.T) {
	run := func(n int) float64 {
		return testing.AllocsPerRun(5, func() {
			i := 0
			_ = Repeat(context.Background(), Steps{Step: func(context.Context) (Wait, error) {
				switch i++; {
				case i > n:
					return Wait{}, shard.ErrStaleEpoch
				case i%2 == 0:
					return Wait{}, nil // again at once
				}
				return Wait{For: time.Nanosecond}, nil // on the timer
			}})
		})
	}
	if one, many := run(1), run(1001); many-one >= 10 {
		t.Fatalf("Repeat allocated %v times for 1 step and %v for 1,001", one, many)
	}
}
