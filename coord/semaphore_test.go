package coord

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

func TestSemaphoreNeverExceedsLimit(t *testing.T) {
	t.Parallel()
	rdb, ctx := setup(t)
	const limit, workers, rounds = 3, 12, 15
	s, err := NewSemaphore(rdb, "db", limit, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var inUse, most atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				p, err := s.Acquire(ctx)
				if err != nil {
					errc <- err
					return
				}
				n := inUse.Add(1)
				for {
					m := most.Load()
					if n <= m || most.CompareAndSwap(m, n) {
						break
					}
				}
				if live, err := s.InUse(ctx); err != nil || live > limit {
					errc <- errors.Join(err, errors.New("InUse above the limit"))
				}
				time.Sleep(2 * time.Millisecond) // the work done under the permit
				inUse.Add(-1)
				if err := s.Release(ctx, p); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	t.Logf("%d workers x %d rounds on %d permits: at most %d held at once", workers, rounds, limit, most.Load())
	if most.Load() > limit {
		t.Fatalf("%d permits held at once, limit %d", most.Load(), limit)
	}
	if n, _ := s.InUse(ctx); n != 0 {
		t.Fatalf("InUse %d after every permit was released", n)
	}
	noHub(t, rdb)
}

func TestSemaphoreCrashedHolderPermitReturnsAfterLease(t *testing.T) {
	t.Parallel()
	rdb, ctx := setup(t)
	const lease = 2 * time.Second // long enough that a loaded CI machine takes both permits before it ends
	s, _ := NewSemaphore(rdb, "partner", 2, lease)
	sent := time.Now()
	// Two holders take both permits and "crash": nobody releases them.
	crashed := make([]Permit, 2)
	for i := range crashed {
		p, err := s.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		crashed[i] = p
	}
	if _, err := s.TryAcquire(ctx); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("third TryAcquire: %v, want ErrNotAcquired", err)
	}
	p, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := time.Since(sent)
	t.Logf("blocked Acquire got a crashed holder's permit %s after it was taken (lease %s)", got, lease)
	// The permits were taken at server time >= sent, so they expire at or
	// after sent+lease: getting one earlier would break the lease.
	if got < lease {
		t.Fatalf("permit handed out after %s, before its lease of %s ended", got, lease)
	}
	// The first crashed permit to expire freed the one Acquire got; the
	// other was taken a moment later (longer on a busy machine) and may
	// still be live: wait until only p is.
	testenv.WaitFor(t, lease+5*time.Second, "the other crashed permit expired", func() (bool, string) {
		n, err := s.InUse(ctx)
		return err == nil && n == 1, fmt.Sprintf("%d in use, %v", n, err)
	})
	for _, c := range crashed {
		mustIs(t, s.Release(ctx, c), ErrNotHeld)
	}
	if err := s.Release(ctx, p); err != nil {
		t.Fatal(err)
	}
	noHub(t, rdb)
}

func TestSemaphoreHandoffLatency(t *testing.T) {
	t.Parallel()
	rdb, ctx := setup(t)
	const handoffs = 200
	s, _ := NewSemaphore(rdb, "handoff", 1, 30*time.Second)
	// Keep the process's wake hub open, as in a worker with other waiters:
	// the figure is the steady-state hand-off, not a subscription set-up.
	idle, _ := NewSemaphore(rdb, "idle", 1, 30*time.Second)
	idleHeld, _ := idle.Acquire(ctx)
	idleCtx, stopIdle := context.WithCancel(ctx)
	idleDone := make(chan struct{})
	go func() {
		defer close(idleDone)
		_, _ = idle.Acquire(idleCtx)
	}()
	waitWaiting(t, rdb, idle.channel, 1)
	defer func() {
		stopIdle()
		<-idleDone
		_ = idle.Release(ctx, idleHeld)
	}()
	held, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		p   Permit
		at  time.Time
		err error
	}
	lat := make([]time.Duration, 0, handoffs)
	for i := 0; i < handoffs; i++ {
		ch := make(chan got, 1)
		go func() {
			p, err := s.Acquire(ctx)
			ch <- got{p, time.Now(), err}
		}()
		waitWaiting(t, rdb, s.channel, 1)
		released := time.Now()
		if err := s.Release(ctx, held); err != nil {
			t.Fatal(err)
		}
		g := <-ch
		if g.err != nil {
			t.Fatal(g.err)
		}
		lat = append(lat, g.at.Sub(released))
		held = g.p
	}
	if err := s.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
	t.Logf("release -> blocked Acquire over %d hand-offs: p50 %s, p99 %s, max %s",
		handoffs, percentile(lat, 50), percentile(lat, 99), percentile(lat, 100))
}

func TestSemaphoreReleaseAndRefreshOfDeadPermits(t *testing.T) {
	t.Parallel()
	rdb, ctx := setup(t)
	s, _ := NewSemaphore(rdb, "pool", 2, 100*time.Millisecond)

	// Foreign: never acquired.
	mustIs(t, s.Release(ctx, Permit{ID: "not-a-permit"}), ErrNotHeld)
	mustIs(t, s.Refresh(ctx, Permit{ID: "not-a-permit"}, time.Second), ErrNotHeld)

	// Refresh extends a live permit.
	p, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := rdb.ZScore(ctx, s.key, p.ID).Val()
	if err := s.Refresh(ctx, p, time.Minute); err != nil {
		t.Fatal(err)
	}
	if after := rdb.ZScore(ctx, s.key, p.ID).Val(); after-before < float64(50*time.Second/time.Millisecond) {
		t.Fatalf("Refresh moved the expiry from %.0f to %.0f only", before, after)
	}
	// Released twice.
	if err := s.Release(ctx, p); err != nil {
		t.Fatal(err)
	}
	mustIs(t, s.Release(ctx, p), ErrNotHeld)

	// Expired: neither released nor revived.
	p, _ = s.TryAcquire(ctx)
	testenv.WaitFor(t, 5*time.Second, "the permit to expire", func() (bool, string) {
		n, err := s.InUse(ctx)
		return err == nil && n == 0, "permit still live"
	})
	mustIs(t, s.Refresh(ctx, p, time.Minute), ErrNotHeld)
	mustIs(t, s.Release(ctx, p), ErrNotHeld)
	if n, _ := s.InUse(ctx); n != 0 {
		t.Fatal("an expired permit was revived")
	}
}

func TestSemaphoreAcquireCancelled(t *testing.T) {
	t.Parallel()
	rdb, ctx := setup(t)
	s, _ := NewSemaphore(rdb, "one", 1, 30*time.Second)
	held, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mustTimeOut(t, ctx, "Acquire", func(c context.Context) error { _, err := s.Acquire(c); return err })
	if n, _ := s.InUse(ctx); n != 1 {
		t.Fatalf("InUse %d after a cancelled Acquire, want 1", n)
	}
	if err := s.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
	noHub(t, rdb)
}

// A cancelled waiter leaves the queue; the release goes to the next one.
func TestSemaphoreCancelledWaiterDoesNotBlockOthers(t *testing.T) {
	t.Parallel()
	rdb, ctx := setup(t)
	s, _ := NewSemaphore(rdb, "pass", 1, 30*time.Second)
	held, _ := s.Acquire(ctx)
	cctx, cancel := context.WithCancel(ctx)
	first := make(chan error, 1)
	go func() {
		_, err := s.Acquire(cctx)
		first <- err
	}()
	waitWaiting(t, rdb, s.channel, 1)
	second := make(chan Permit, 1)
	go func() {
		p, err := s.Acquire(ctx)
		if err != nil {
			t.Error(err)
		}
		second <- p
	}()
	waitWaiting(t, rdb, s.channel, 2)
	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	start := time.Now()
	if err := s.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
	p := <-second
	t.Logf("second waiter got the permit %s after release", time.Since(start))
	if err := s.Release(ctx, p); err != nil {
		t.Fatal(err)
	}
	noHub(t, rdb)
}

// A waiter that leaves with a wake-up it did not act on passes it to the
// next local waiter, so a cancelled waiter never swallows a release.
func TestWakePassedOnByLeavingWaiter(t *testing.T) {
	t.Parallel()
	rdb, _ := setup(t)
	const ch = "{x}:sem:wake"
	w1 := newWaiter(rdb, ch)
	select { // the subscription confirmation wakes the waiters
	case <-w1.c:
		w1.woken()
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up on subscription")
	}
	w2 := newWaiter(rdb, ch)
	select {
	case <-w2.c:
		w2.woken()
	default:
	}
	w1.h.wake(ch, false, unaddressed) // a release: the oldest waiter gets it
	w1.h.mu.Lock()
	picked := w1.pending
	w1.h.mu.Unlock()
	if !picked {
		t.Fatal("wakeOne did not pick the oldest waiter")
	}
	select {
	case <-w2.c:
		t.Fatal("wakeOne woke two waiters")
	default:
	}
	w1.close(false) // leaves without acting on it
	select {
	case <-w2.c:
		w2.woken()
	case <-time.After(10 * time.Second):
		t.Fatal("the leaving waiter swallowed the wake-up")
	}
	w2.close(false)
	noHub(t, rdb)
}
