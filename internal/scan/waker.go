package scan

import (
	"context"
	"fmt"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/redis/go-redis/v9"
)

// Waker delivers wake-up messages of many shards over one sharded
// pub/sub connection (SSUBSCRIBE). Each subscriber gets a channel with a
// buffer of one, so bursts of wake-ups coalesce and a slow mover never
// blocks the connection.
//
// After a reconnect go-redis subscribes again; the Waker then wakes every
// subscriber once, because messages published while disconnected are
// lost.
type Waker struct {
	ps  *redis.PubSub
	log hclog.Logger
	met *Metrics

	mu   sync.Mutex
	subs map[string]chan struct{}
}

// NewWaker opens the pub/sub connection lazily on rdb.
func NewWaker(rdb redis.UniversalClient, log hclog.Logger, met *Metrics) *Waker {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Waker{
		ps:   rdb.SSubscribe(context.Background()),
		log:  log.Named("waker"),
		met:  met,
		subs: make(map[string]chan struct{}),
	}
}

// Subscribe starts delivering wake-ups published on channel. The returned
// function unsubscribes; call it when the shard's mover stops.
func (w *Waker) Subscribe(ctx context.Context, channel string) (<-chan struct{}, func(), error) {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	w.subs[channel] = ch
	w.mu.Unlock()
	if err := w.ps.SSubscribe(ctx, channel); err != nil {
		w.mu.Lock()
		delete(w.subs, channel)
		w.mu.Unlock()
		return nil, nil, fmt.Errorf("scan: subscribe %s: %w", channel, err)
	}
	if w.met != nil {
		w.met.subscribers.Inc()
	}
	return ch, func() {
		w.mu.Lock()
		if w.subs[channel] == ch {
			delete(w.subs, channel)
		}
		w.mu.Unlock()
		if w.met != nil {
			w.met.subscribers.Dec()
		}
		// Best effort: a failed unsubscribe only costs ignored messages.
		_ = w.ps.SUnsubscribe(context.Background(), channel)
	}, nil
}

// Run dispatches messages until ctx ends, then closes the connection.
func (w *Waker) Run(ctx context.Context) error {
	msgs := w.ps.ChannelWithSubscriptions()
	defer w.ps.Close()
	for {
		select {
		case <-ctx.Done():
			return nil
		case m, ok := <-msgs:
			if !ok {
				return nil
			}
			switch m := m.(type) {
			case *redis.Message:
				if w.met != nil {
					w.met.wakeups.Inc()
				}
				w.wake(m.Channel)
			case *redis.Subscription:
				// Also sent when go-redis re-subscribes after a reconnect:
				// wake the shard in case a message was lost meanwhile.
				if m.Kind == "ssubscribe" {
					w.wake(m.Channel)
				}
			}
		}
	}
}

func (w *Waker) wake(channel string) {
	w.mu.Lock()
	ch := w.subs[channel]
	w.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case ch <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// Close closes the pub/sub connection; Run returns.
func (w *Waker) Close() error { return w.ps.Close() }
