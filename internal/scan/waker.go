package scan

import (
	"context"
	"sync"

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
// function unsubscribes; call it when the shard's mover stops. A failed
// subscription is logged and retried when the connection is back;
// meanwhile the mover runs on its safety re-check.
func (w *Waker) Subscribe(ctx context.Context, channel string) (<-chan struct{}, func()) {
	if w.met == nil {
		return w.hub.Signal(ctx, channel, nil)
	}
	ch, unsubscribe := w.hub.Signal(ctx, channel, func(e fanout.Event) {
		if !e.Subscribed {
			w.met.wakeups.Inc()
		}
	})
	w.met.subscribers.Inc()
	return ch, sync.OnceFunc(func() {
		unsubscribe()
		w.met.subscribers.Dec()
	})
}

// Close closes the pub/sub connections that subscriptions still hold.
func (w *Waker) Close() { w.hub.Close() }
