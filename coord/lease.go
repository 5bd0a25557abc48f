package coord

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass"
	"github.com/hourglass-sched/hourglass/internal/errtext"
)

// LockOption configures a Lock or an RWLock.
type LockOption func(*lockOptions)

type lockOptions struct {
	watchdog bool
	fencing  bool
}

// WithWatchdog makes every lease of the lock extend itself by the lock's
// ttl every ttl/3 until it is released. If an extension finds the lease
// gone (expired or taken by another owner), or cannot reach Redis before
// the lease would expire, the watchdog stops and the lease's Lost channel
// is closed. A watchdog keeps a lease alive only while its process runs
// and reaches Redis: a paused or partitioned holder still loses it.
func WithWatchdog() LockOption { return func(o *lockOptions) { o.watchdog = true } }

// WithFencing gives every lease of the lock (every write lease of an
// RWLock) a fencing token: a number drawn from a counter that grows with
// each acquisition. Pass it to the resource the lock protects and have
// the resource reject a token lower than the highest it has seen: a
// holder that was paused past its lease and still believes it holds the
// lock is then refused. The counter is one Redis key per lock name that
// never expires.
func WithFencing() LockOption { return func(o *lockOptions) { o.fencing = true } }

// leaseKind says which scripts release and extend a lease.
type leaseKind int

const (
	lockLease  leaseKind = iota // STRING key holding the owner token
	writeLease                  // RWLock writer: same as lockLease, wakes all
	readLease                   // member of the RWLock readers ZSET
)

// Lease is a held Lock, or a read or write lease of an RWLock. It carries
// the owner token that Release and Extend present: only the holder can
// release or extend it, and only while it has not expired.
type Lease struct {
	rdb     redis.UniversalClient
	what    string // "lock \"name\"", for errors
	kind    leaseKind
	key     string
	channel string
	token   string
	fence   int64
	ttl     time.Duration

	lost      chan struct{}
	lostOnce  sync.Once
	stopWatch context.CancelFunc // nil without a watchdog
	watchDone chan struct{}
}

// newLease returns a lease acquired (by a script sent) at sent, and starts
// its watchdog if asked to.
func newLease(rdb redis.UniversalClient, what string, kind leaseKind, key, channel, token string, fence int64, ttl time.Duration, sent time.Time, watchdog bool) *Lease {
	le := &Lease{rdb: rdb, what: what, kind: kind, key: key, channel: channel, token: token, fence: fence, ttl: ttl, lost: make(chan struct{})}
	if watchdog {
		ctx, cancel := context.WithCancel(context.Background())
		le.stopWatch, le.watchDone = cancel, make(chan struct{})
		go le.watch(ctx, sent.Add(ttl))
	}
	return le
}

// Token returns the owner token: random, unique to this acquisition.
func (le *Lease) Token() string { return le.token }

// Fence returns the fencing token of a lease taken with WithFencing (see
// there), or 0. Read leases of an RWLock have none.
func (le *Lease) Fence() int64 { return le.fence }

// Lost returns a channel that is closed once the lease is known to be
// lost: its watchdog could not extend it, or an Extend or Release found
// it not held. It is not closed by a successful Release. Without a
// watchdog, loss is noticed only by Extend and Release.
func (le *Lease) Lost() <-chan struct{} { return le.lost }

func (le *Lease) markLost() { le.lostOnce.Do(func() { close(le.lost) }) }

// Release gives the lease up (compare-and-delete: only if this owner
// still holds it) and wakes waiters. It stops the watchdog first. A
// release after expiry, a second release, or a release of a lease that
// another owner now holds changes nothing and returns ErrNotHeld.
func (le *Lease) Release(ctx context.Context) error {
	le.stopWatchdog()
	var n int64
	var err error
	if le.kind == readLease {
		n, err = zsetReleaseScript.Run(ctx, le.rdb, []string{le.key}, le.token, le.channel, wakeAll, "last").Int64()
	} else {
		msg := wakeOne
		if le.kind == writeLease {
			msg = wakeAll
		}
		n, err = lockReleaseScript.Run(ctx, le.rdb, []string{le.key}, le.token, le.channel, msg).Int64()
	}
	if err != nil {
		return errtext.Errorf("release %s: %w", le.what, err)
	}
	if n != 1 {
		le.markLost()
		return errtext.Errorf("release %s: %w", le.what, ErrNotHeld)
	}
	return nil
}

// stopWatchdog stops the watchdog, if any, and waits for it to end. It
// may be called more than once (Cond.Wait gives the lease up in its own
// script).
func (le *Lease) stopWatchdog() {
	if le.stopWatch != nil {
		le.stopWatch()
		<-le.watchDone
	}
}

// Extend sets the lease to expire ttl from now (Redis server time), if
// this owner still holds it (compare-and-pexpire); otherwise it changes
// nothing and returns ErrNotHeld. An expired lease is never revived, even
// if nobody took it meanwhile. The watchdog, if any, goes on extending by
// the lock's own ttl.
func (le *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	if ttl < time.Millisecond {
		return fmt.Errorf("%w: extend %s: ttl %s is below 1ms", hourglass.ErrInvalidArgument, le.what, ttl)
	}
	err := le.extend(ctx, ttl)
	if errors.Is(err, ErrNotHeld) {
		le.markLost()
	}
	return err
}

func (le *Lease) extend(ctx context.Context, ttl time.Duration) error {
	var n int64
	var err error
	if le.kind == readLease {
		n, err = zsetRefreshScript.Run(ctx, le.rdb, []string{le.key}, le.token, ms(ttl)).Int64()
	} else {
		n, err = lockExtendScript.Run(ctx, le.rdb, []string{le.key}, le.token, ms(ttl)).Int64()
	}
	if err != nil {
		return errtext.Errorf("extend %s: %w", le.what, err)
	}
	if n != 1 {
		return errtext.Errorf("extend %s: %w", le.what, ErrNotHeld)
	}
	return nil
}

// watch extends the lease every ttl/3 until ctx ends (Release). deadline
// is a conservative local estimate of the lease's expiry: the time the
// last successful extension was sent, plus ttl. A failed extension is
// retried sooner; once the deadline passes, or as soon as an extension
// finds the lease not held, the lease is lost.
func (le *Lease) watch(ctx context.Context, deadline time.Time) {
	defer close(le.watchDone)
	interval := le.ttl / 3
	retry := max(interval/4, time.Millisecond)
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		left := time.Until(deadline)
		if left <= 0 {
			le.markLost()
			return
		}
		sent := time.Now()
		cctx, cancel := context.WithTimeout(ctx, left)
		err := le.extend(cctx, le.ttl)
		cancel()
		switch {
		case err == nil:
			deadline = sent.Add(le.ttl)
			t.Reset(interval)
		case ctx.Err() != nil:
			return
		case errors.Is(err, ErrNotHeld):
			le.markLost()
			return
		default:
			t.Reset(min(retry, max(time.Until(deadline), 0)))
		}
	}
}
