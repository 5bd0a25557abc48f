package coord

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

func TestLockSecondOwnerCannotReleaseOrExtend(t *testing.T) {
	t.Parallel()
	rdb, ctx := setup(t)
	a, err := NewLock(rdb, "orders", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	held, err := a.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewLock(rdb, "orders", 10*time.Second)
	if _, err := b.TryAcquire(ctx); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("second TryAcquire: %v, want ErrNotAcquired", err)
	}
	// An owner presenting another token (a forged or stale lease).
	intruder := newLease(rdb, a.what(), lockLease, a.key, a.channel, "intruder", 0, a.ttl, time.Now(), false)
	mustIs(t, intruder.Release(ctx), ErrNotHeld)
	mustIs(t, intruder.Extend(ctx, time.Hour), ErrNotHeld)
	if !isClosed(intruder.Lost()) {
		t.Fatal("a rejected release does not mark the lease lost")
	}
	if v, _ := rdb.Get(ctx, a.key).Result(); v != held.Token() {
		t.Fatalf("lock holds %q after the intruder's attempts, want %q", v, held.Token())
	}
	if pttl := rdb.PTTL(ctx, a.key).Val(); pttl > 10*time.Second {
		t.Fatalf("the intruder's extension changed the expiry: pttl %s", pttl)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	mustIs(t, held.Release(ctx), ErrNotHeld) // a second release
}

func TestLockExpiredHolderLateReleaseRejected(t *testing.T) {
	t.Parallel()
	rdb, ctx := setup(t)
	l, _ := NewLock(rdb, "report", 150*time.Millisecond)
	old, err := l.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 5*time.Second, "the lease to expire", func() (bool, string) {
		return rdb.Exists(ctx, l.key).Val() == 0, "lock key still exists"
	})
	// Expired and free: the late release changes nothing.
	mustIs(t, old.Release(ctx), ErrNotHeld)
	mustIs(t, old.Extend(ctx, time.Minute), ErrNotHeld)
	if n := rdb.Exists(ctx, l.key).Val(); n != 0 {
		t.Fatal("the late extension revived the lock")
	}
	// Expired and taken by another owner: the late holder cannot release
	// or extend the new holder's lease.
	old2, _ := l.TryAcquire(ctx)
	testenv.WaitFor(t, 5*time.Second, "the lease to expire", func() (bool, string) {
		return rdb.Exists(ctx, l.key).Val() == 0, "lock key still exists"
	})
	l2, _ := NewLock(rdb, "report", 10*time.Second)
	cur, err := l2.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mustIs(t, old2.Release(ctx), ErrNotHeld)
	mustIs(t, old2.Extend(ctx, time.Minute), ErrNotHeld)
	if v := rdb.Get(ctx, l.key).Val(); v != cur.Token() {
		t.Fatalf("lock holds %q, want the new holder's %q", v, cur.Token())
	}
	if err := cur.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestLockWatchdogKeepsLongHolder(t *testing.T) {
	t.Parallel()
	rdb, ctx := setup(t)
	const ttl = 500 * time.Millisecond
	l, _ := NewLock(rdb, "long", ttl, WithWatchdog())
	le, err := l.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := NewLock(rdb, "long", ttl)
	start := time.Now()
	testenv.WaitFor(t, 20*time.Second, "4 ttls to pass with the lock held", func() (bool, string) {
		if v := rdb.Get(ctx, l.key).Val(); v != le.Token() {
			t.Fatalf("after %s the lock holds %q, not the watched lease", time.Since(start), v)
		}
		if _, err := other.TryAcquire(ctx); !errors.Is(err, ErrNotAcquired) {
			t.Fatalf("after %s another owner got the lock: %v", time.Since(start), err)
		}
		return time.Since(start) > 4*ttl, "held for " + time.Since(start).String()
	})
	if isClosed(le.Lost()) {
		t.Fatal("Lost closed while the lease was held")
	}
	if err := le.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if isClosed(le.Lost()) {
		t.Fatal("Lost closed by a release")
	}

	// A watched lease taken from under it (here: deleted and re-taken by
	// hand, as after an expiry) is reported lost at the next extension.
	le, err = l.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rdb.Set(ctx, l.key, "someone-else", time.Minute)
	select {
	case <-le.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("Lost not closed after the lock was taken by another owner")
	}
	mustIs(t, le.Release(ctx), ErrNotHeld)
	if v := rdb.Get(ctx, l.key).Val(); v != "someone-else" {
		t.Fatalf("the lost lease's release changed the lock: %q", v)
	}
}

func TestLockAcquireWakesOnRelease(t *testing.T) {
	t.Parallel()
	rdb, ctx := setup(t)
	l, _ := NewLock(rdb, "handoff", 30*time.Second, WithFencing())
	first, err := l.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		le  *Lease
		at  time.Time
		err error
	}
	ch := make(chan got, 1)
	go func() {
		le, err := l.Acquire(ctx)
		ch <- got{le, time.Now(), err}
	}()
	waitWaiting(t, rdb, l.channel, 1)
	released := time.Now()
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	g := <-ch
	if g.err != nil {
		t.Fatal(g.err)
	}
	wait := g.at.Sub(released)
	t.Logf("blocked Acquire got the lock %s after Release (lease 30s)", wait)
	if wait > 10*time.Second {
		t.Fatalf("Acquire waited %s: it woke on expiry, not on the release", wait)
	}
	if g.le.Fence() <= first.Fence() {
		t.Fatalf("fencing tokens do not grow: %d then %d", first.Fence(), g.le.Fence())
	}
	if err := g.le.Release(ctx); err != nil {
		t.Fatal(err)
	}
	noHub(t, rdb)
}

func TestLockAcquireCancelled(t *testing.T) {
	t.Parallel()
	rdb, ctx := setup(t)
	l, _ := NewLock(rdb, "busy", 30*time.Second)
	held, err := l.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Deadline.
	mustTimeOut(t, ctx, "Acquire", func(c context.Context) error { _, err := l.Acquire(c); return err })
	// Cancellation while blocked.
	cctx, cancel2 := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := l.Acquire(cctx)
		errc <- err
	}()
	waitWaiting(t, rdb, l.channel, 1)
	cancel2()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Acquire: %v", err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, l.key).Val(); n != 0 {
		t.Fatal("a cancelled Acquire left the lock held")
	}
	noHub(t, rdb)
}

func TestLockMutualExclusionUnderContention(t *testing.T) {
	t.Parallel()
	rdb, ctx := setup(t)
	const workers, rounds = 8, 10
	l, _ := NewLock(rdb, "counter", 10*time.Second)
	done := make(chan error, workers)
	for w := 0; w < workers; w++ {
		go func() {
			for i := 0; i < rounds; i++ {
				le, err := l.Acquire(ctx)
				if err != nil {
					done <- err
					return
				}
				// Read-modify-write that loses updates without mutual
				// exclusion.
				n, _ := strconv.Atoi(rdb.Get(ctx, "counter").Val())
				rdb.Set(ctx, "counter", n+1, 0)
				if err := le.Release(ctx); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for w := 0; w < workers; w++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if got := rdb.Get(ctx, "counter").Val(); got != strconv.Itoa(workers*rounds) {
		t.Fatalf("counter %s, want %d", got, workers*rounds)
	}
	noHub(t, rdb)
}

func TestNamesAndDurationsValidated(t *testing.T) {
	t.Parallel()
	rdb, _ := setup(t)
	if _, err := NewLock(rdb, "", time.Second); err == nil {
		t.Error("empty name accepted")
	}
	if _, err := NewLock(rdb, "a{b}", time.Second); err == nil {
		t.Error("name with braces accepted")
	}
	if _, err := NewLock(rdb, "a", time.Microsecond); err == nil {
		t.Error("ttl below 1ms accepted")
	}
	if _, err := NewSemaphore(rdb, "a", 0, time.Second); err == nil {
		t.Error("limit 0 accepted")
	}
	if _, err := NewTokenBucket(rdb, "a", 0, time.Second, 1); err == nil {
		t.Error("rate 0 accepted")
	}
	if _, err := NewLeakyBucket(rdb, "a", time.Second, -1); err == nil {
		t.Error("negative capacity accepted")
	}
}
