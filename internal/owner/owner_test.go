package owner

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errFenced = errors.New("fenced")

// TestFirstToStopStopsAll: every loop gets the shard and one shared
// Ready channel; when one loop stops with an error, the others' ctx ends,
// Run waits for them and returns the error under the loop's name.
func TestFirstToStopStopsAll(t *testing.T) {
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
		done <- Run(context.Background(), Shard{ID: 3, Epoch: 7, Wake: wake}, []Loop{relay, fenced, waiter}, nil)
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
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{}, 2)
	loop := Loop{Name: "l", Run: func(ctx context.Context, _ Shard) error {
		started <- struct{}{}
		<-ctx.Done()
		return nil
	}}
	done := make(chan error, 1)
	go func() { done <- Run(ctx, Shard{}, []Loop{loop, loop}, nil) }()
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
