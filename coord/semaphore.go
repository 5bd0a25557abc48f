package coord

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass"
	"github.com/hourglass-sched/hourglass/internal/errtext"
)

// Semaphore is a counting semaphore on Redis whose permits expire: a
// ZSET of permit ids scored by expiry (Redis server time + lease). Every
// acquisition purges expired permits first, so a permit of a holder that
// crashed returns after its lease, without any release. A Semaphore value
// is safe for concurrent use.
//
// Guarantees and limits:
//   - While Redis keeps its data, at most limit permits are live at once.
//     The limit is passed by each caller: processes that use different
//     limits for one name each enforce their own.
//   - A permit is held for its lease (server clock); the holder refreshes
//     it (Refresh) while it works. A holder paused or cut off for longer
//     than its lease loses its permit without knowing, and the permit may
//     be handed out again: limit+1 workers can then run for a while. Keep
//     the lease longer than the longest pause you must tolerate.
//   - Release and Refresh of an expired or foreign permit change nothing
//     and return ErrNotHeld.
//   - On a Redis failover the replica may not have the latest
//     acquisitions: permits can be handed out twice until those expire.
//
// Fairness is best effort. Within a process, a release wakes the oldest
// waiter first; across processes each process's oldest waiter retries
// and whichever reaches Redis first wins. There is no global FIFO: a
// waiter can be overtaken by a newcomer whose TryAcquire arrives first.
type Semaphore struct {
	rdb     redis.UniversalClient
	name    string
	limit   int
	lease   time.Duration
	key     string
	channel string
}

// Permit is one acquired permit of a Semaphore. Its ID is random and
// unique; a permit can be released or refreshed from any process that
// knows the ID.
type Permit struct {
	ID string
}

// NewSemaphore returns a semaphore named name with limit permits (at
// least 1), each held for lease (at least 1ms) unless refreshed. Its key
// is {name}:sem and it wakes waiters on the channel {name}:sem:wake. It
// fails only on invalid arguments.
func NewSemaphore(rdb redis.UniversalClient, name string, limit int, lease time.Duration) (*Semaphore, error) {
	if err := checkName("semaphore", name); err != nil {
		return nil, err
	}
	if limit < 1 {
		return nil, fmt.Errorf("%w: semaphore %q: limit %d is below 1", hourglass.ErrInvalidArgument, name, limit)
	}
	if err := checkDuration("semaphore", name, "lease", lease); err != nil {
		return nil, err
	}
	return &Semaphore{rdb: rdb, name: name, limit: limit, lease: lease, key: key(name, "sem"), channel: key(name, "sem:wake")}, nil
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Limit returns the number of permits.
func (s *Semaphore) Limit() int { return s.limit }

func (s *Semaphore) what() string { return fmt.Sprintf("semaphore %q", s.name) }

// TryAcquire takes a permit if one is free, in one round trip. It returns
// ErrNotAcquired if all permits are held.
func (s *Semaphore) TryAcquire(ctx context.Context) (Permit, error) {
	id := rand.Text()
	ok, _, err := s.try(ctx, id)
	if err == nil && !ok {
		err = errtext.Errorf("acquire %s: %w", s.what(), ErrNotAcquired)
	}
	if err != nil {
		return Permit{}, err
	}
	return Permit{ID: id}, nil
}

// Acquire takes a permit, waiting as long as ctx allows. A waiter sleeps
// until a release is published on the semaphore's wake channel or the
// earliest permit expires, whichever comes first; it holds no Redis
// connection while it sleeps (see the package documentation). When ctx
// ends first it returns ctx's error and holds nothing.
func (s *Semaphore) Acquire(ctx context.Context) (Permit, error) {
	id := rand.Text()
	err := blockingAcquire(ctx, s.rdb, s.what(), s.channel, s.lease, func(ctx context.Context) (bool, time.Duration, error) {
		return s.try(ctx, id)
	})
	if err != nil {
		return Permit{}, err
	}
	return Permit{ID: id}, nil
}

// try runs one acquisition of permit id. It reports success, or how long
// until the earliest permit expires.
func (s *Semaphore) try(ctx context.Context, id string) (bool, time.Duration, error) {
	res, err := semAcquireScript.Run(ctx, s.rdb, []string{s.key}, id, s.limit, ms(s.lease)).Int64Slice()
	if err != nil {
		cleanup(ctx, func(ctx context.Context) error {
			return zsetReleaseScript.Run(ctx, s.rdb, []string{s.key}, id, s.channel, wakeOne, "always").Err()
		})
		return false, 0, errtext.Errorf("acquire %s: %w", s.what(), err)
	}
	if res[0] != 1 {
		return false, time.Duration(res[1]) * time.Millisecond, nil
	}
	return true, 0, nil
}

// Release returns a permit and wakes one waiter per process. Releasing a
// permit that expired, was already released, or was never acquired
// changes nothing and returns ErrNotHeld.
func (s *Semaphore) Release(ctx context.Context, p Permit) error {
	n, err := zsetReleaseScript.Run(ctx, s.rdb, []string{s.key}, p.ID, s.channel, wakeOne, "always").Int64()
	if err != nil {
		return errtext.Errorf("release permit %s of %s: %w", p.ID, s.what(), err)
	}
	return s.heldResult("release", p, n)
}

// Refresh sets a live permit to expire lease from now (Redis server
// time). A permit that expired, was released, or was never acquired is
// not revived: Refresh changes nothing and returns ErrNotHeld.
func (s *Semaphore) Refresh(ctx context.Context, p Permit, lease time.Duration) error {
	if err := checkDuration("semaphore", s.name, "lease", lease); err != nil {
		return err
	}
	n, err := zsetRefreshScript.Run(ctx, s.rdb, []string{s.key}, p.ID, ms(lease)).Int64()
	if err != nil {
		return errtext.Errorf("refresh permit %s of %s: %w", p.ID, s.what(), err)
	}
	return s.heldResult("refresh", p, n)
}

func (s *Semaphore) heldResult(op string, p Permit, n int64) error {
	switch n {
	case 1:
		return nil
	case -1:
		return errtext.Errorf("%s permit %s of %s: expired: %w", op, p.ID, s.what(), ErrNotHeld)
	default:
		return errtext.Errorf("%s permit %s of %s: unknown permit: %w", op, p.ID, s.what(), ErrNotHeld)
	}
}

// InUse returns the number of live (unexpired) permits.
func (s *Semaphore) InUse(ctx context.Context) (int, error) {
	n, err := semInUseScript.Run(ctx, s.rdb, []string{s.key}).Int()
	if err != nil {
		return 0, errtext.Errorf("permits in use of %s: %w", s.what(), err)
	}
	return n, nil
}
