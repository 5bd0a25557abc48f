package coord

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/errtext"
)

// Lock is a mutual-exclusion lock on Redis with a lease: one key holding
// the owner token of the current holder, with the lease as its expiry.
// A Lock value is safe for concurrent use and holds no state between
// acquisitions; each acquisition returns its own Lease.
//
// Guarantees and limits:
//   - While Redis keeps its data, at most one owner holds the lock at a
//     time, and a lease ends after ttl (server clock) unless extended.
//   - Only the holder releases or extends (compare-and-delete and
//     compare-and-pexpire on the owner token, in Lua); a late release or
//     extension by a holder whose lease expired returns ErrNotHeld and
//     changes nothing.
//   - A holder that is paused (GC, SIGSTOP, a slow disk) or cut off from
//     Redis for longer than its lease loses it without knowing, and
//     another owner may acquire it: two processes then believe they hold
//     it. Protect the resource with fencing tokens (WithFencing), or keep
//     the work shorter than the lease.
//   - On a Redis failover the replica may not have received the latest
//     writes (replication is asynchronous): an acquisition can be lost and
//     the lock held twice. For a lock that must survive failover use a
//     consensus store (etcd) rather than Redis.
type Lock struct {
	rdb     redis.UniversalClient
	name    string
	ttl     time.Duration
	opts    lockOptions
	key     string
	fence   string
	channel string
}

// NewLock returns a lock named name whose leases last ttl (at least 1ms)
// unless extended. Its keys are {name}:lock and {name}:lock:fence, and it
// wakes waiters on the channel {name}:lock:wake. It fails only on an
// invalid name or ttl.
func NewLock(rdb redis.UniversalClient, name string, ttl time.Duration, opts ...LockOption) (*Lock, error) {
	if err := checkName("lock", name); err != nil {
		return nil, err
	}
	if err := checkDuration("lock", name, "ttl", ttl); err != nil {
		return nil, err
	}
	l := &Lock{rdb: rdb, name: name, ttl: ttl, key: key(name, "lock"), fence: key(name, "lock:fence"), channel: key(name, "lock:wake")}
	for _, o := range opts {
		o(&l.opts)
	}
	return l, nil
}

// Name returns the lock's name.
func (l *Lock) Name() string { return l.name }

func (l *Lock) what() string { return fmt.Sprintf("lock %q", l.name) }

// TryAcquire takes the lock if it is free, in one round trip. It returns
// ErrNotAcquired if another owner holds it.
func (l *Lock) TryAcquire(ctx context.Context) (*Lease, error) {
	le, _, err := l.try(ctx)
	if err == nil && le == nil {
		err = errtext.Errorf("acquire %s: %w", l.what(), ErrNotAcquired)
	}
	return le, err
}

// Acquire takes the lock, waiting as long as ctx allows. A waiter sleeps
// until a release is published on the lock's wake channel or the current
// lease expires, whichever comes first; it holds no Redis connection
// while it sleeps (see the package documentation). When ctx ends first it
// returns ctx's error and holds nothing.
func (l *Lock) Acquire(ctx context.Context) (*Lease, error) {
	var le *Lease
	err := blockingAcquire(ctx, l.rdb, l.what(), l.channel, l.ttl, func(ctx context.Context) (bool, time.Duration, error) {
		got, wait, err := l.try(ctx)
		le = got
		return got != nil, wait, err
	})
	if err != nil {
		return nil, err
	}
	return le, nil
}

// try runs one acquisition. It returns the lease, or how long the current
// holder's lease has left.
func (l *Lock) try(ctx context.Context) (*Lease, time.Duration, error) {
	token := rand.Text()
	fencing := "0"
	if l.opts.fencing {
		fencing = "1"
	}
	sent := time.Now()
	res, err := lockAcquireScript.Run(ctx, l.rdb, []string{l.key, l.fence}, token, ms(l.ttl), fencing).Int64Slice()
	if err != nil {
		// The script may have run even though we got no answer: release
		// by token, which is harmless if it did not.
		cleanup(ctx, func(ctx context.Context) error {
			return lockReleaseScript.Run(ctx, l.rdb, []string{l.key}, token, l.channel, wakeOne).Err()
		})
		return nil, 0, errtext.Errorf("acquire %s: %w", l.what(), err)
	}
	if res[0] != 1 {
		return nil, time.Duration(res[1]) * time.Millisecond, nil
	}
	return newLease(l.rdb, l.what(), lockLease, l.key, l.channel, token, res[1], l.ttl, sent, l.opts.watchdog), 0, nil
}

// cleanup runs undo with a short deadline that does not depend on ctx
// having ended: it takes back an acquisition whose reply was lost. If it
// fails too, the acquisition expires with its lease.
func cleanup(ctx context.Context, undo func(ctx context.Context) error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_ = undo(ctx)
}
