package backoff

import (
	"context"
	"testing"
	"time"
)

func TestDoublesUpToMaxAndResets(t *testing.T) {
	t.Parallel()
	b := Backoff{Min: 10 * time.Millisecond, Max: 35 * time.Millisecond}
	var got []time.Duration
	for i := 0; i < 4; i++ {
		got = append(got, b.Next())
	}
	want := []time.Duration{10, 20, 35, 35}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("delays %v, want %v ms", got, want)
		}
	}
	b.Reset()
	if d := b.Next(); d != 10*time.Millisecond {
		t.Fatalf("after Reset: %s", d)
	}
	var zero Backoff
	if d := zero.Next(); d != 50*time.Millisecond {
		t.Fatalf("zero value starts at %s", d)
	}
}

func TestWaitEndsWithCtx(t *testing.T) {
	t.Parallel()
	b := Backoff{Min: time.Hour}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan struct{})
	go func() { b.Wait(ctx); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Wait ignored a cancelled ctx")
	}
}
