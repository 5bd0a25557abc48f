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

// Cond is a condition variable on Redis, tied to a Lock (the distributed
// lock manager's condition): Wait releases the lock and waits, atomically,
// and takes the lock again before it returns; Signal wakes the longest
// waiting waiter, Broadcast every waiter waiting at that moment. Waiters
// in any process are woken by pub/sub, not by polling, and share their
// process's pub/sub connection with the other blocked acquirers (see the
// package documentation). A Cond value is safe for concurrent use.
//
// As with sync.Cond, a wake-up says the condition may have changed:
// check it again under the lock, in a loop.
//
// Waiters that die. Each waiter refreshes its liveness every third of
// the Cond's liveness period while it waits (the Redis round trip that
// also takes a wake-up lost with a dropped pub/sub connection). A waiter
// whose liveness lapses is dropped from the waiters. The guarantee:
//   - A Signal wakes one live waiter (one whose liveness has not lapsed),
//     the oldest; if none is waiting it is lost, as with sync.Cond.
//   - A Signal's wake-up that its waiter does not take within the
//     liveness period (the waiter died, or is paused that long) passes to
//     the oldest live waiter then, at the next call of any waiter's
//     heartbeat, Wait, Signal or Broadcast on the Cond. So a waiter that
//     dies swallows no Signal while another waiter lives, at the cost of
//     a delay of up to about 4/3 of the liveness period (the period, and
//     the next heartbeat). The waiter it passes to may have started
//     waiting after the Signal was sent. A waiter that took it late finds
//     it gone and waits again, last in line.
//   - A Wait that gives up (its ctx ended, before or while it takes the
//     lock again) passes a Signal's wake-up it took on at once.
//   - Broadcast wakes the live waiters there are when it runs, and only
//     those; a dead one's wake-up is dropped.
//
// Keys (all with the lock's hash tag, so a Cond works on a Redis Cluster
// as its Lock does): {lock}:cond:<name>:q, :alive, :sig and :seq, and the
// wake channel {lock}:cond:<name>:wake. They expire three liveness
// periods after the last call.
type Cond struct {
	lock     *Lock
	name     string
	liveness time.Duration
	keys     []string // q, alive, sig, seq
	channel  string
}

// DefaultLiveness is the liveness period of a Cond made with liveness 0.
const DefaultLiveness = 3 * time.Second

// NewCond returns the condition name of lock l. liveness (at least 30ms;
// 0 means DefaultLiveness) is how long a waiter that stops refreshing is
// still counted as waiting; it bounds how long a Signal meant for a dead
// waiter waits before it passes on. Every process must use the same
// liveness for one condition.
func NewCond(l *Lock, name string, liveness time.Duration) (*Cond, error) {
	if l == nil {
		return nil, fmt.Errorf("%w: condition %q: nil lock", hourglass.ErrInvalidArgument, name)
	}
	if err := checkName("condition", name); err != nil {
		return nil, err
	}
	if liveness == 0 {
		liveness = DefaultLiveness
	}
	if liveness < 30*time.Millisecond {
		return nil, fmt.Errorf("%w: condition %q: liveness %s is below 30ms", hourglass.ErrInvalidArgument, name, liveness)
	}
	base := key(l.name, "cond:"+name)
	return &Cond{lock: l, name: name, liveness: liveness,
		keys:    []string{base + ":q", base + ":alive", base + ":sig", base + ":seq"},
		channel: base + ":wake"}, nil
}

func (c *Cond) what() string { return fmt.Sprintf("condition %q of lock %q", c.name, c.lock.name) }

// Wait releases held, a lease of the Cond's lock, and waits until a
// Signal or Broadcast wakes it, or timeout passes (0: no bound); then it
// takes the lock again (waiting for it as Lock.Acquire does) and returns
// the new lease, and whether it was woken (false: timed out). held is
// given up in every case.
//
// When ctx ends first it returns ctx's error and holds nothing; a
// Signal it took and can no longer act on goes to another waiter. It
// also returns an error, holding nothing, when Redis does not answer its
// heartbeats for a liveness period (it counts as dead by then).
// ErrNotHeld: held was not held (nothing changed; the caller holds
// nothing).
func (c *Cond) Wait(ctx context.Context, held *Lease, timeout time.Duration) (*Lease, bool, error) {
	if held == nil || held.key != c.lock.key {
		return nil, false, fmt.Errorf("%w: wait on %s: the lease is not of its lock", hourglass.ErrInvalidArgument, c.what())
	}
	if timeout < 0 {
		return nil, false, fmt.Errorf("%w: wait on %s: negative timeout %s", hourglass.ErrInvalidArgument, c.what(), timeout)
	}
	id := rand.Text()
	w := newAddressedWaiter(c.lock.rdb, c.channel, id)
	defer w.close(false)
	held.stopWatchdog()
	keys := append([]string{c.lock.key}, c.keys...)
	n, err := condWaitScript.Run(ctx, c.lock.rdb, keys, held.token, id, ms(c.liveness), c.lock.channel, c.channel).Int64()
	if err != nil {
		// The script may have run: leave as a waiter that gives up, and
		// release the lease in case it did not.
		c.giveUp(ctx, id)
		cleanup(ctx, held.Release)
		return nil, false, errtext.Errorf("wait on %s: %w", c.what(), err)
	}
	if n != 1 {
		held.markLost()
		return nil, false, errtext.Errorf("wait on %s: %w", c.what(), ErrNotHeld)
	}
	kind, err := c.await(ctx, w, id, timeout)
	if err != nil {
		return nil, false, err
	}
	le, err := c.lock.Acquire(ctx)
	if err != nil {
		if kind == "1" {
			// Taken but not acted on: another waiter gets it.
			cleanup(ctx, func(ctx context.Context) error { _, err := c.Signal(ctx); return err })
		}
		return nil, kind != "", err
	}
	return le, kind != "", nil
}

// await waits as waiter id until it is woken or timeout passes,
// refreshing its liveness every third of the liveness period, and
// returns the kind of wake-up it took ("" when it timed out). A check
// runs to its end even when ctx ends meanwhile (checkTimeout bounds it),
// so that a wake-up it takes is not lost with its reply.
func (c *Cond) await(ctx context.Context, w *waiter, id string, timeout time.Duration) (string, error) {
	beat := time.NewTicker(c.liveness / 3)
	defer beat.Stop()
	var end <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		end = t.C
	}
	lastOK := time.Now()
	for {
		op := "stay"
		select {
		case <-ctx.Done():
			c.giveUp(ctx, id)
			return "", errtext.Errorf("wait on %s: %w", c.what(), ctx.Err())
		case <-w.c:
			w.woken()
		case <-beat.C:
		case <-end:
			op = "leave"
		}
		kind, err := c.check(ctx, id, op)
		switch {
		case err == nil && (kind != "" || op == "leave"):
			return kind, nil
		case err == nil:
			lastOK = time.Now()
		case op == "leave" || time.Since(lastOK) > c.liveness:
			// Timed out, or counted as dead by now: stop here.
			c.giveUp(ctx, id)
			return "", err
		}
	}
}

// checkTimeout bounds one cond_check.lua call.
const checkTimeout = 5 * time.Second

// check runs cond_check.lua for waiter id with op, whether or not ctx
// has ended, and returns the kind of wake-up it took.
func (c *Cond) check(ctx context.Context, id, op string) (string, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), checkTimeout)
	defer cancel()
	kind, err := condCheckScript.Run(ctx, c.lock.rdb, c.keys, id, ms(c.liveness), op, c.channel).Text()
	if err != nil {
		return "", errtext.Errorf("wait on %s: %w", c.what(), err)
	}
	return kind, nil
}

// giveUp ends waiter id's wait, passing a Signal it got on (best effort:
// if Redis does not answer, the Signal passes on when the waiter's
// liveness lapses).
func (c *Cond) giveUp(ctx context.Context, id string) { _, _ = c.check(ctx, id, "give") }

// Signal wakes the oldest live waiter, if there is one, and reports
// whether there was. The caller need not hold the lock.
func (c *Cond) Signal(ctx context.Context) (bool, error) {
	n, err := c.signal(ctx, "one")
	return n == 1, err
}

// Broadcast wakes every live waiter there is now and returns how many.
// The caller need not hold the lock.
func (c *Cond) Broadcast(ctx context.Context) (int, error) {
	return c.signal(ctx, "all")
}

func (c *Cond) signal(ctx context.Context, op string) (int, error) {
	n, err := condSignalScript.Run(ctx, c.lock.rdb, c.keys, op, ms(c.liveness), c.channel).Int()
	if err != nil {
		verb := map[string]string{"one": "signal", "all": "broadcast"}[op]
		return 0, errtext.Errorf("%s %s: %w", verb, c.what(), err)
	}
	return n, nil
}

// Waiters returns how many waiters the condition has now, live or not
// yet found dead.
func (c *Cond) Waiters(ctx context.Context) (int64, error) {
	n, err := c.lock.rdb.ZCard(ctx, c.keys[0]).Result()
	if err != nil && err != redis.Nil {
		return 0, errtext.Errorf("waiters of %s: %w", c.what(), err)
	}
	return n, nil
}
