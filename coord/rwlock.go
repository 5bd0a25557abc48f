package coord

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/errtext"
)

// RWLock is a read-write lock on Redis: many readers or one writer, each
// holding a lease that expires unless extended, so a crashed holder
// frees the lock after its lease. It prefers writers: a writer that waits
// leaves a "writer waiting" marker that keeps new readers out, so a
// stream of overlapping readers cannot starve it; readers already in keep
// their leases and the writer gets the lock when the last one leaves. An
// RWLock value is safe for concurrent use.
//
// Keys: {name}:rw:writer (STRING, the writer's token, PX = lease),
// {name}:rw:readers (ZSET reader id -> expiry), {name}:rw:waiting (ZSET
// waiting writer -> marker expiry), {name}:rw:fence (WithFencing); wake
// channel {name}:rw:wake.
//
// Guarantees and limits:
//   - While Redis keeps its data, either no writer and any number of
//     readers, or one writer and no reader, hold live leases.
//   - A waiting writer re-asserts its marker every ttl/2 while it waits
//     (the marker lives ttl), so a writer that crashed while waiting stops
//     blocking readers within ttl. A writer that gives up (ctx ended)
//     removes its marker at once.
//   - A reader that asks for a second read lease while a writer waits
//     blocks until the writer is done: read leases are not reentrant. An
//     unbroken stream of writers keeps readers out.
//   - Like Lock: a holder paused past its lease loses it without knowing
//     (fence writers with WithFencing), and a Redis failover can lose
//     recent acquisitions.
//   - Every release wakes all local waiters of the lock (readers may all
//     proceed at once), so a contended RWLock costs one retry per waiter
//     per release.
type RWLock struct {
	rdb     redis.UniversalClient
	name    string
	ttl     time.Duration
	opts    lockOptions
	writer  string
	readers string
	waiting string
	fence   string
	channel string
}

// NewRWLock returns a read-write lock named name whose leases last ttl (at
// least 1ms) unless extended. WithWatchdog applies to read and write
// leases, WithFencing to write leases. It fails only on an invalid name
// or ttl.
func NewRWLock(rdb redis.UniversalClient, name string, ttl time.Duration, opts ...LockOption) (*RWLock, error) {
	if err := checkName("rwlock", name); err != nil {
		return nil, err
	}
	if err := checkDuration("rwlock", name, "ttl", ttl); err != nil {
		return nil, err
	}
	rw := &RWLock{
		rdb: rdb, name: name, ttl: ttl,
		writer: key(name, "rw:writer"), readers: key(name, "rw:readers"),
		waiting: key(name, "rw:waiting"), fence: key(name, "rw:fence"),
		channel: key(name, "rw:wake"),
	}
	for _, o := range opts {
		o(&rw.opts)
	}
	return rw, nil
}

// Name returns the lock's name.
func (rw *RWLock) Name() string { return rw.name }

func (rw *RWLock) what(mode string) string {
	return fmt.Sprintf("%s lease of rwlock %q", mode, rw.name)
}

// TryAcquireRead takes a read lease if no writer holds or waits for the
// lock, in one round trip; otherwise it returns ErrNotAcquired.
func (rw *RWLock) TryAcquireRead(ctx context.Context) (*Lease, error) {
	le, _, err := rw.tryRead(ctx, rand.Text())
	if err == nil && le == nil {
		err = errtext.Errorf("acquire %s: %w", rw.what("read"), ErrNotAcquired)
	}
	return le, err
}

// AcquireRead takes a read lease, waiting as long as ctx allows for the
// writer (holding or waiting) to leave. When ctx ends first it returns
// ctx's error and holds nothing.
func (rw *RWLock) AcquireRead(ctx context.Context) (*Lease, error) {
	id := rand.Text()
	var le *Lease
	err := blockingAcquire(ctx, rw.rdb, rw.what("read"), rw.channel, rw.ttl, func(ctx context.Context) (bool, time.Duration, error) {
		got, wait, err := rw.tryRead(ctx, id)
		le = got
		return got != nil, wait, err
	})
	return le, err
}

func (rw *RWLock) tryRead(ctx context.Context, id string) (*Lease, time.Duration, error) {
	sent := time.Now()
	res, err := rwReadScript.Run(ctx, rw.rdb, []string{rw.writer, rw.readers, rw.waiting}, id, ms(rw.ttl)).Int64Slice()
	if err != nil {
		cleanup(ctx, func(ctx context.Context) error {
			return zsetReleaseScript.Run(ctx, rw.rdb, []string{rw.readers}, id, rw.channel, wakeAll, "last").Err()
		})
		return nil, 0, errtext.Errorf("acquire %s: %w", rw.what("read"), err)
	}
	if res[0] != 1 {
		return nil, time.Duration(res[1]) * time.Millisecond, nil
	}
	return newLease(rw.rdb, rw.what("read"), readLease, rw.readers, rw.channel, id, 0, rw.ttl, sent, rw.opts.watchdog), 0, nil
}

// TryAcquireWrite takes the write lease if nobody holds the lock, in one
// round trip; otherwise it returns ErrNotAcquired. A failed TryAcquireWrite
// leaves no marker: it does not hold readers back.
func (rw *RWLock) TryAcquireWrite(ctx context.Context) (*Lease, error) {
	le, _, err := rw.tryWrite(ctx, rand.Text(), 0)
	if err == nil && le == nil {
		err = errtext.Errorf("acquire %s: %w", rw.what("write"), ErrNotAcquired)
	}
	return le, err
}

// AcquireWrite takes the write lease, waiting as long as ctx allows.
// While it waits, new readers are kept out. When ctx ends first it
// removes its marker, returns ctx's error and holds nothing.
func (rw *RWLock) AcquireWrite(ctx context.Context) (*Lease, error) {
	token := rand.Text()
	var le *Lease
	err := blockingAcquire(ctx, rw.rdb, rw.what("write"), rw.channel, max(rw.ttl/2, time.Millisecond), func(ctx context.Context) (bool, time.Duration, error) {
		got, wait, err := rw.tryWrite(ctx, token, rw.ttl)
		le = got
		return got != nil, wait, err
	})
	if err != nil {
		cleanup(ctx, func(ctx context.Context) error {
			return rwAbandonScript.Run(ctx, rw.rdb, []string{rw.waiting}, token, rw.channel).Err()
		})
		return nil, err
	}
	return le, nil
}

// tryWrite runs one write acquisition; marker is how long the "writer
// waiting" marker lives if it fails (0: leave none).
func (rw *RWLock) tryWrite(ctx context.Context, token string, marker time.Duration) (*Lease, time.Duration, error) {
	fencing := "0"
	if rw.opts.fencing {
		fencing = "1"
	}
	markerMS := int64(0)
	if marker > 0 {
		markerMS = ms(marker)
	}
	sent := time.Now()
	res, err := rwWriteScript.Run(ctx, rw.rdb, []string{rw.writer, rw.readers, rw.waiting, rw.fence}, token, ms(rw.ttl), fencing, markerMS).Int64Slice()
	if err != nil {
		cleanup(ctx, func(ctx context.Context) error {
			if err := lockReleaseScript.Run(ctx, rw.rdb, []string{rw.writer}, token, rw.channel, wakeAll).Err(); err != nil {
				return err
			}
			return rwAbandonScript.Run(ctx, rw.rdb, []string{rw.waiting}, token, rw.channel).Err()
		})
		return nil, 0, errtext.Errorf("acquire %s: %w", rw.what("write"), err)
	}
	if res[0] != 1 {
		return nil, time.Duration(res[1]) * time.Millisecond, nil
	}
	return newLease(rw.rdb, rw.what("write"), writeLease, rw.writer, rw.channel, token, res[1], rw.ttl, sent, rw.opts.watchdog), 0, nil
}
