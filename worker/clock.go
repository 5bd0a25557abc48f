package worker

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/hourglass-sched/hourglass/internal/shard"
)

// clockReadTimeout bounds one reading of a server's clock: a delivery
// waits for it before its handler may start, and an unleased one must be
// leased within shard.MaxLeaseAfter of its pop.
const clockReadTimeout = 100 * time.Millisecond

// redisClock tells when, on the worker's clock, a task may start: not
// before the clock of the Redis server that holds its shard shows its due
// time. That is the clock the scheduler compared the due time with when
// it moved the task, and a task moved ahead of it (scheduler.prefetch) is
// held until then; holding on the worker's own clock would start it early
// by however far that clock runs ahead. It keeps one reading per server
// (shard.ClockReading), taken at a server's first delivery, and reads
// again when a task is to be held on a reading last checked longer than
// shard.ClockReadAge ago, keeping the better of the two: a worker that
// holds no task reads no clock.
type redisClock struct {
	store *shard.Store
	now   func() time.Time
	log   hclog.Logger

	mu      sync.Mutex
	sources map[int]*clockSource // by shard.Store.ClockSource
}

// clockRetryAfter is how long after a failed reading of a server's clock
// deliveries do without one (the last reading, else the worker's own
// clock) instead of each waiting out another read.
const clockRetryAfter = time.Second

// clockSource is one server's reading. Deliveries read it without a lock;
// mu serialises the readings of the clock.
type clockSource struct {
	mu       sync.Mutex
	reading  atomic.Pointer[shard.ClockReading]
	failedAt time.Time // the last failed read (under mu)
}

func newRedisClock(store *shard.Store, now func() time.Time, log hclog.Logger) *redisClock {
	return &redisClock{store: store, now: now, log: log, sources: map[int]*clockSource{}}
}

// startAt returns when, on the worker's clock, a task of shard sh due at
// due (on its server's clock) may start; a time not after now means at
// once. It reads the server's clock first if there is no reading yet, or
// if the task is to be held and the reading is old (its drift allowance
// would hold the task longer than needed). If no reading can be had it
// falls back to due on the worker's own clock.
func (c *redisClock) startAt(ctx context.Context, sh int, due time.Time) time.Time {
	src := c.source(sh)
	r := src.reading.Load()
	if r != nil && c.fresh(r, due) {
		return r.Local(due)
	}
	// Another delivery reading the clock is not waited for when there is
	// a reading: an old one is still safe, it only holds a little longer.
	if r != nil && !src.mu.TryLock() {
		return r.Local(due)
	}
	if r == nil {
		src.mu.Lock()
	}
	defer src.mu.Unlock()
	if r = c.refresh(ctx, src, sh, due); r == nil {
		return due
	}
	return r.Local(due)
}

// hasReading reports whether startAt had a reading of shard sh's server
// clock to go by.
func (c *redisClock) hasReading(sh int) bool { return c.source(sh).reading.Load() != nil }

// refresh returns src's reading for a task of shard sh due at due,
// reading the clock again unless another delivery just did or a read
// failed less than clockRetryAfter ago; nil when there is none. The
// caller holds src.mu.
func (c *redisClock) refresh(ctx context.Context, src *clockSource, sh int, due time.Time) *shard.ClockReading {
	r := src.reading.Load()
	if (r != nil && c.fresh(r, due)) || (!src.failedAt.IsZero() && c.now().Sub(src.failedAt) < clockRetryAfter) {
		return r
	}
	rctx, cancel := context.WithTimeout(ctx, clockReadTimeout)
	nr, err := c.store.ReadClock(rctx, sh, c.now)
	cancel()
	switch {
	case err != nil:
		src.failedAt = c.now()
		if r == nil {
			c.log.Debug("could not read Redis's clock; holding on the worker's", "shard", sh, "error", err)
		}
		return r
	case r == nil || nr.Local(due).Before(r.Local(due)):
		// Keep the reading that holds the task for less: each is safe,
		// and the one whose reply came back fastest (or that drifted
		// least since) is the closest to Redis's clock.
		r = &nr
	default:
		// The old reading stays better; mark it as checked now so that
		// the next hold does not read again at once.
		checked := *r
		checked.Checked = nr.Received
		r = &checked
	}
	src.reading.Store(r)
	return r
}

// fresh reports whether reading r serves a task due at due: it says the
// task may start now, or it is recent enough to hold the task on.
func (c *redisClock) fresh(r *shard.ClockReading, due time.Time) bool {
	now := c.now()
	return !r.Local(due).After(now) || now.Sub(r.LastChecked()) <= shard.ClockReadAge
}

func (c *redisClock) source(sh int) *clockSource {
	key := c.store.ClockSource(sh)
	c.mu.Lock()
	defer c.mu.Unlock()
	src := c.sources[key]
	if src == nil {
		src = &clockSource{}
		c.sources[key] = src
	}
	return src
}
