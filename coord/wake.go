package coord

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/hourglass-sched/hourglass/internal/errtext"
	"github.com/hourglass-sched/hourglass/internal/fanout"
	"github.com/redis/go-redis/v9"
)

// Blocked acquirers wait without holding a Redis connection each: every
// process shares one pub/sub connection per client (internal/fanout; per
// channel for a Ring), opened when the first acquirer on that client
// starts waiting and closed when the last one stops. Release scripts
// PUBLISH on the primitive's wake channel; the hub hands each message to
// local waiters:
//
//   - wakeOne ("1", a lock or one permit was released): the oldest local
//     waiter that has no wake-up pending. One waiter per process retries,
//     not all of them.
//   - wakeAll ("*", a read-write lock changed): every local waiter.
//   - anything else is a waiter's id (a Cond's Signal or Broadcast): that
//     waiter, if it is in this process.
//
// A subscription confirmation (the first one, and each one after go-redis
// reconnected and re-subscribed) wakes every waiter of the channel, so a
// release that happened before the subscription took effect, or while
// the connection was down, is not missed: the waiters retry.
//
// Waiters also sleep on a timer bounded by the primitive's expiry (the
// holder's remaining lease, the earliest permit expiry), since a crashed
// holder's lease ends without any message.

const (
	wakeOne = "1"
	wakeAll = "*"
)

// hubs holds the live hubs, one per client.
var hubs = struct {
	sync.Mutex
	m map[redis.UniversalClient]*hub
}{m: map[redis.UniversalClient]*hub{}}

// hub is one client's shared pub/sub (internal/fanout, which routes a
// Ring's channels to their shards) and its waiters.
// Lifecycle: created by the first waiter, which takes a reference; each
// waiter's close drops its reference; the last one removes the hub from
// hubs and closes its fanout hub.
type hub struct {
	rdb  redis.UniversalClient
	ps   *fanout.Hub
	refs int // guarded by hubs

	// sub serialises a channel's first subscription and last
	// unsubscription with the changes of chans that decide them. It is
	// never taken while mu is held, and listeners take only mu.
	sub   sync.Mutex
	mu    sync.Mutex
	chans map[string]*wakeChan
}

// wakeChan is one channel's subscription and waiters, oldest first.
type wakeChan struct {
	sub     *fanout.Subscription // set and cleared under hub.sub
	waiters []*waiter
}

// waiter is one blocked acquirer. c holds at most one wake-up; pending is
// true while it does (both under hub.mu).
type waiter struct {
	h       *hub
	channel string
	id      string // set for a Cond's waiter: the wake-ups addressed to it
	c       chan struct{}
	pending bool
}

// newWaiter registers a waiter on channel, subscribing the client's hub
// to it if needed. The caller must close the waiter.
func newWaiter(rdb redis.UniversalClient, channel string) *waiter {
	return newAddressedWaiter(rdb, channel, "")
}

// newAddressedWaiter is newWaiter for a waiter that the messages naming
// id wake (a Cond's); id "" takes the wakeOne messages instead.
func newAddressedWaiter(rdb redis.UniversalClient, channel, id string) *waiter {
	hubs.Lock()
	h := hubs.m[rdb]
	if h == nil {
		h = &hub{rdb: rdb, ps: fanout.New(rdb, fanout.Classic, nil), chans: map[string]*wakeChan{}}
		hubs.m[rdb] = h
	}
	h.refs++
	hubs.Unlock()

	w := &waiter{h: h, channel: channel, id: id, c: make(chan struct{}, 1)}
	h.sub.Lock()
	defer h.sub.Unlock()
	h.mu.Lock()
	wc := h.chans[channel]
	if wc == nil {
		wc = &wakeChan{}
		h.chans[channel] = wc
	}
	wc.waiters = append(wc.waiters, w)
	h.mu.Unlock()
	if wc.sub == nil {
		// The confirmation (the first one, and each one after go-redis
		// reconnected) wakes every waiter of the channel.
		wc.sub = h.ps.Subscribe(context.Background(), channel, func(e fanout.Event) {
			switch {
			case e.Subscribed || e.Payload == wakeAll:
				h.wake(channel, true, anyWaiter)
			case e.Payload == wakeOne:
				h.wake(channel, false, unaddressed)
			default:
				h.wake(channel, false, func(w *waiter) bool { return w.id == e.Payload })
			}
		})
	}
	return w
}

// wake signals the idle waiters of channel that match: the oldest one,
// or all of them.
func (h *hub) wake(channel string, all bool, match func(*waiter) bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	wc := h.chans[channel]
	if wc == nil {
		return
	}
	for _, w := range wc.waiters {
		if !w.pending && match(w) {
			w.pending = true
			w.c <- struct{}{} // cannot block: c is empty while !pending
			if !all {
				return
			}
		}
	}
}

// anyWaiter and unaddressed select the waiters a message wakes: every
// one, or those of Lock, Semaphore and RWLock (not a Cond's, whose
// wake-ups name them).
func anyWaiter(*waiter) bool     { return true }
func unaddressed(w *waiter) bool { return w.id == "" }

// woken must be called after receiving from w.c, before retrying.
func (w *waiter) woken() {
	w.h.mu.Lock()
	w.pending = false
	w.h.mu.Unlock()
}

// close unregisters the waiter. A wake-up it received and did not act on
// (pending, or passOn when it gives up) goes to the next local waiter, so
// a cancelled waiter does not swallow a release.
func (w *waiter) close(passOn bool) {
	h := w.h
	h.sub.Lock()
	h.mu.Lock()
	wc := h.chans[w.channel]
	wc.waiters = slices.DeleteFunc(wc.waiters, func(x *waiter) bool { return x == w })
	// A Cond's waiter passes nothing on: its wake-ups are its own, and
	// Redis holds them (cond_check.lua passes on a Signal's).
	passOn = (passOn || w.pending) && w.id == ""
	last := len(wc.waiters) == 0
	if last {
		delete(h.chans, w.channel)
	}
	h.mu.Unlock()
	if passOn {
		h.wake(w.channel, false, unaddressed)
	}
	h.sub.Unlock()
	if last {
		// Outside h.sub: a waiter arriving now makes a new wakeChan with a
		// subscription of its own, and fanout orders the two.
		wc.sub.Close()
	}

	hubs.Lock()
	h.refs--
	lastRef := h.refs == 0
	if lastRef {
		delete(hubs.m, h.rdb)
	}
	hubs.Unlock()
	if lastRef {
		h.ps.Close()
	}
}

// waiting returns how many acquirers of rdb wait on channel (for tests).
func waiting(rdb redis.UniversalClient, channel string) int {
	hubs.Lock()
	h := hubs.m[rdb]
	hubs.Unlock()
	if h == nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if wc := h.chans[channel]; wc != nil {
		return len(wc.waiters)
	}
	return 0
}

// tryFunc makes one acquisition attempt. It reports success, or how long
// the caller may wait before the blocker can be gone without a release.
type tryFunc func(ctx context.Context) (ok bool, wait time.Duration, err error)

// blockingAcquire calls try until it succeeds, waiting between attempts
// for a wake-up on channel, for the wait try reported (capped at maxWait),
// or for ctx to end. try must clean up after itself if it fails with an
// error; blockingAcquire returns ctx's error, naming what it was
// acquiring, when ctx ends first.
func blockingAcquire(ctx context.Context, rdb redis.UniversalClient, what, channel string, maxWait time.Duration, try tryFunc) error {
	ok, wait, err := try(ctx)
	if err != nil || ok {
		return err
	}
	w := newWaiter(rdb, channel)
	passOn := true
	defer func() { w.close(passOn) }()
	timer := time.NewTimer(waitFor(wait, maxWait))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return errtext.Errorf("acquire %s: %w", what, ctx.Err())
		case <-w.c:
			w.woken()
		case <-timer.C:
		}
		ok, wait, err = try(ctx)
		if err != nil {
			return err
		}
		if ok {
			passOn = false
			return nil
		}
		timer.Reset(waitFor(wait, maxWait))
	}
}

// waitFor bounds a reported wait: one extra ms so that the blocker has
// expired when the timer fires (Redis expires a key only after its last
// ms), and at most maxWait.
func waitFor(wait, maxWait time.Duration) time.Duration {
	if wait < 0 || wait > maxWait {
		wait = maxWait
	}
	return wait + time.Millisecond
}
