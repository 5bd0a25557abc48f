package coord

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Blocked acquirers wait without holding a Redis connection each: every
// process shares one pub/sub connection per client (a hub; per channel
// for a Ring), opened when the first acquirer on that client starts
// waiting and closed when the last one stops. Release scripts PUBLISH on the primitive's wake channel;
// the hub hands each message to local waiters:
//
//   - wakeOne ("1", a lock or one permit was released): the oldest local
//     waiter that has no wake-up pending. One waiter per process retries,
//     not all of them.
//   - wakeAll ("*", a read-write lock changed): every local waiter.
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

// hubs holds the live hubs.
var hubs = struct {
	sync.Mutex
	m map[hubKey]*hub
}{m: map[hubKey]*hub{}}

// hubKey names a hub: one per client, except for a Ring, which shards
// channels as it shards keys (a primitive's channel lands on the shard of
// its keys, where its scripts publish): there, one hub per channel.
type hubKey struct {
	rdb     redis.UniversalClient
	channel string
}

func hubKeyFor(rdb redis.UniversalClient, channel string) hubKey {
	if _, ok := rdb.(*redis.Ring); ok {
		return hubKey{rdb, channel}
	}
	return hubKey{rdb: rdb}
}

// hub is a shared pub/sub connection and its waiters.
// Lifecycle: created by the first waiter, which takes a reference and
// opens the PubSub (outside the hubs lock: it may dial); each waiter's
// close drops its reference; the last one removes the hub from hubs,
// closes the PubSub (which ends the dispatch goroutine) and waits for the
// goroutine to return.
type hub struct {
	key     hubKey
	started chan struct{} // closed once ps is set and dispatch runs
	ps      *redis.PubSub
	done    chan struct{} // closed when dispatch returns
	refs    int           // guarded by hubs

	mu    sync.Mutex
	chans map[string]*wakeChan
}

// wakeChan is one channel's subscription state and waiters, oldest first.
type wakeChan struct {
	subscribed bool
	waiters    []*waiter
}

// waiter is one blocked acquirer. c holds at most one wake-up; pending is
// true while it does (both under hub.mu).
type waiter struct {
	h       *hub
	channel string
	c       chan struct{}
	pending bool
}

// newWaiter registers a waiter on channel, subscribing a hub to it if
// needed. The caller must close the waiter.
func newWaiter(rdb redis.UniversalClient, channel string) *waiter {
	k := hubKeyFor(rdb, channel)
	hubs.Lock()
	h := hubs.m[k]
	create := h == nil
	if create {
		h = &hub{key: k, started: make(chan struct{}), done: make(chan struct{}), chans: map[string]*wakeChan{}}
		hubs.m[k] = h
	}
	h.refs++
	hubs.Unlock()

	w := &waiter{h: h, channel: channel, c: make(chan struct{}, 1)}
	h.mu.Lock()
	wc := h.chans[channel]
	if wc == nil {
		wc = &wakeChan{}
		h.chans[channel] = wc
	}
	wc.waiters = append(wc.waiters, w)
	subscribe := !wc.subscribed
	wc.subscribed = true
	h.mu.Unlock()

	// go-redis records a channel even if the SUBSCRIBE write fails, and
	// subscribes again on reconnect; the confirmation wakes the waiters.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if create {
		h.ps = rdb.Subscribe(ctx, channel)
		go h.dispatch(h.ps.ChannelWithSubscriptions(redis.WithChannelSize(256)))
		close(h.started)
	} else if subscribe {
		<-h.started
		_ = h.ps.Subscribe(ctx, channel)
	}
	return w
}

// dispatch delivers messages and subscription confirmations to waiters
// until the PubSub is closed.
func (h *hub) dispatch(ch <-chan any) {
	defer close(h.done)
	for m := range ch {
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				h.wake(m.Channel, true)
			}
		case *redis.Message:
			h.wake(m.Channel, m.Payload == wakeAll)
		}
	}
}

// wake signals the oldest idle waiter of channel, or all of them.
func (h *hub) wake(channel string, all bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	wc := h.chans[channel]
	if wc == nil {
		return
	}
	for _, w := range wc.waiters {
		if !w.pending {
			w.pending = true
			w.c <- struct{}{} // cannot block: c is empty while !pending
			if !all {
				return
			}
		}
	}
}

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
	h.mu.Lock()
	wc := h.chans[w.channel]
	for i, x := range wc.waiters {
		if x == w {
			wc.waiters = append(wc.waiters[:i], wc.waiters[i+1:]...)
			break
		}
	}
	passOn = passOn || w.pending
	h.mu.Unlock()
	if passOn {
		h.wake(w.channel, false)
	}

	hubs.Lock()
	h.refs--
	last := h.refs == 0
	if last {
		delete(hubs.m, h.key)
	}
	hubs.Unlock()
	if last {
		<-h.started
		_ = h.ps.Close()
		<-h.done
	}
}

// waiting returns how many acquirers of rdb wait on channel (for tests).
func waiting(rdb redis.UniversalClient, channel string) int {
	hubs.Lock()
	h := hubs.m[hubKeyFor(rdb, channel)]
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
			return fmt.Errorf("coord: acquire %s: %w", what, ctx.Err())
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
