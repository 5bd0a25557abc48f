package coord

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

func TestRWLockReadersShare(t *testing.T) {
	t.Parallel()
	rdb, ctx := setup(t)
	rw, err := NewRWLock(rdb, "catalog", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var readers []*Lease
	for i := 0; i < 3; i++ {
		le, err := rw.TryAcquireRead(ctx)
		if err != nil {
			t.Fatalf("reader %d: %v", i, err)
		}
		readers = append(readers, le)
	}
	if _, err := rw.TryAcquireWrite(ctx); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("writer with readers in: %v, want ErrNotAcquired", err)
	}
	// A failed TryAcquireWrite leaves no marker: readers still get in.
	le, err := rw.TryAcquireRead(ctx)
	if err != nil {
		t.Fatalf("reader after a failed TryAcquireWrite: %v", err)
	}
	readers = append(readers, le)
	for _, r := range readers {
		if err := r.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	mustIs(t, readers[0].Release(ctx), ErrNotHeld)
	w, err := rw.TryAcquireWrite(ctx)
	if err != nil {
		t.Fatalf("writer after readers left: %v", err)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestRWLockWriterExcludes(t *testing.T) {
	t.Parallel()
	rdb, ctx := setup(t)
	rw, _ := NewRWLock(rdb, "catalog", 10*time.Second, WithFencing())
	w, err := rw.TryAcquireWrite(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if w.Fence() < 1 {
		t.Fatalf("fence %d", w.Fence())
	}
	if _, err := rw.TryAcquireRead(ctx); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("reader while a writer holds: %v", err)
	}
	if _, err := rw.TryAcquireWrite(ctx); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("second writer: %v", err)
	}
	// Only the writer can release or extend.
	intruder := newLease(rdb, rw.what("write"), writeLease, rw.writer, rw.channel, "intruder", 0, rw.ttl, time.Now(), false)
	mustIs(t, intruder.Release(ctx), ErrNotHeld)
	mustIs(t, intruder.Extend(ctx, time.Hour), ErrNotHeld)
	if err := w.Extend(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := rw.TryAcquireRead(ctx)
	if err != nil {
		t.Fatalf("reader after the writer left: %v", err)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestRWLockWaitingWriterBlocksNewReaders(t *testing.T) {
	t.Parallel()
	rdb, ctx := setup(t)
	rw, _ := NewRWLock(rdb, "doc", 30*time.Second)
	r1, err := rw.AcquireRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		le  *Lease
		at  time.Time
		err error
	}
	wch := make(chan got, 1)
	go func() {
		le, err := rw.AcquireWrite(ctx)
		wch <- got{le, time.Now(), err}
	}()
	testenv.WaitFor(t, 10*time.Second, "the writer's waiting marker", func() (bool, string) {
		return rdb.ZCard(ctx, rw.waiting).Val() == 1, "no marker"
	})
	if _, err := rw.TryAcquireRead(ctx); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("new reader while a writer waits: %v, want ErrNotAcquired", err)
	}
	rch := make(chan got, 1)
	go func() {
		le, err := rw.AcquireRead(ctx)
		rch <- got{le, time.Now(), err}
	}()
	waitWaiting(t, rdb, rw.channel, 2)
	// The current reader leaves: the writer gets in, the new reader waits.
	released := time.Now()
	if err := r1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w := <-wch
	if w.err != nil {
		t.Fatal(w.err)
	}
	t.Logf("waiting writer got the lock %s after the last reader left", w.at.Sub(released))
	select {
	case r := <-rch:
		t.Fatalf("a new reader got in before the waiting writer was done (err %v)", r.err)
	default:
	}
	if n := rdb.ZCard(ctx, rw.waiting).Val(); n != 0 {
		t.Fatalf("%d waiting markers left after the writer got in", n)
	}
	if err := w.le.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-rch
	if r.err != nil {
		t.Fatal(r.err)
	}
	if !r.at.After(w.at) {
		t.Fatal("the reader got in before the writer")
	}
	if err := r.le.Release(ctx); err != nil {
		t.Fatal(err)
	}
	noHub(t, rdb)
}

func TestRWLockExpiryFreesCrashedHolders(t *testing.T) {
	t.Parallel()
	rdb, ctx := setup(t)
	const ttl = 400 * time.Millisecond
	rw, _ := NewRWLock(rdb, "crash", ttl)

	// A writer that crashed (never releases): a reader gets in after its
	// lease, not before.
	sent := time.Now()
	if _, err := rw.TryAcquireWrite(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := rw.AcquireRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := time.Since(sent); got < ttl {
		t.Fatalf("reader got in %s after a crashed writer took the lock, before its %s lease ended", got, ttl)
	} else {
		t.Logf("reader got in %s after a crashed writer took the lock (lease %s)", got, ttl)
	}

	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// A reader that crashed: a writer gets in after its lease, not before.
	sent = time.Now()
	r, err = rw.TryAcquireRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w, err := rw.AcquireWrite(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := time.Since(sent); got < ttl {
		t.Fatalf("writer got in %s after a crashed reader took the lock, before its %s lease ended", got, ttl)
	}
	mustIs(t, r.Release(ctx), ErrNotHeld)
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	noHub(t, rdb)
}

func TestRWLockCancelledWriterRemovesMarker(t *testing.T) {
	t.Parallel()
	rdb, ctx := setup(t)
	rw, _ := NewRWLock(rdb, "cancel", 30*time.Second)
	r, err := rw.TryAcquireRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mustTimeOut(t, ctx, "AcquireWrite", func(c context.Context) error { _, err := rw.AcquireWrite(c); return err })
	if n := rdb.ZCard(ctx, rw.waiting).Val(); n != 0 {
		t.Fatalf("a cancelled writer left %d markers", n)
	}
	r2, err := rw.TryAcquireRead(ctx)
	if err != nil {
		t.Fatalf("reader after the writer gave up: %v", err)
	}
	for _, le := range []*Lease{r, r2} {
		if err := le.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	noHub(t, rdb)
}

func TestRWLockWatchdogKeepsReader(t *testing.T) {
	t.Parallel()
	rdb, ctx := setup(t)
	const ttl = 500 * time.Millisecond
	rw, _ := NewRWLock(rdb, "watch", ttl, WithWatchdog())
	r, err := rw.TryAcquireRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	testenv.WaitFor(t, 20*time.Second, "4 ttls with the read lease held", func() (bool, string) {
		if _, err := rw.TryAcquireWrite(ctx); !errors.Is(err, ErrNotAcquired) {
			t.Fatalf("writer got in while a watched reader held: %v", err)
		}
		return time.Since(start) > 4*ttl, "held for " + time.Since(start).String()
	})
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
