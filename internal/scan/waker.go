package scan

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/fanout"
)

// Waker delivers the wake-up messages of the shards a scheduler owns,
// over the sharded pub/sub connections of an internal/fanout hub
// (SSUBSCRIBE; one connection for a standalone Redis). Each subscriber
// gets a channel with a buffer of one, so bursts of wake-ups coalesce and
// a slow mover never blocks the connection.
//
// After a reconnect the channel is subscribed again (by go-redis, or on a
// cluster by the hub, also on a slot's new owner); the Waker then wakes
// every subscriber once, because messages published while disconnected
// are lost.
type Waker struct {
	hub *fanout.Hub
	met *Metrics
}

// NewWaker returns a Waker on rdb; it opens its connection with the first
// subscription.
func NewWaker(rdb redis.UniversalClient, log hclog.Logger, met *Metrics) *Waker {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Waker{hub: fanout.New(rdb, fanout.Sharded, log.Named("waker")), met: met}
}

// Subscribe starts delivering wake-ups published on channel. The returned
// function unsubscribes; call it when the shard's mover stops.
// subscribed reports whether Redis has confirmed the subscription (for
// owner.Shard.Subscribed): until it has, the mover runs on its safety
// re-check. A failed subscription is logged and retried when the
// connection is back. After a reconnect go-redis subscribes again, and
// that confirmation is delivered as a wake-up: the mover checks at once
// for what it may have missed.
func (w *Waker) Subscribe(ctx context.Context, channel string) (wake <-chan struct{}, unsubscribe func(), subscribed func() bool) {
	var confirmed atomic.Bool
	ch, unsub := w.hub.Signal(ctx, channel, func(e fanout.Event) {
		if e.Subscribed {
			confirmed.Store(true)
		} else if w.met != nil {
			w.met.wakeups.Inc()
		}
	})
	if w.met == nil {
		return ch, unsub, confirmed.Load
	}
	w.met.subscribers.Inc()
	return ch, sync.OnceFunc(func() {
		unsub()
		w.met.subscribers.Dec()
	}), confirmed.Load
}

// Close closes the pub/sub connections that subscriptions still hold.
func (w *Waker) Close() { w.hub.Close() }
