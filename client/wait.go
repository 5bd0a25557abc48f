package client

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/errtext"
	"github.com/hourglass-sched/hourglass/internal/shard"
)

// waitHub carries the Waits of one Client over one pub/sub connection:
// each waited task's done channel is subscribed once, however many Waits
// want it, and unsubscribed when the last of them returns. The
// connection and its reading goroutine exist while some Wait runs: the
// first subscription opens them, the last unsubscription closes the
// connection and waits for the goroutine.
type waitHub struct {
	store *shard.Store

	mu   sync.Mutex
	ps   *redis.PubSub
	read chan struct{} // closed when the reading goroutine has ended
	// subs maps a subscribed channel to the notice channels of its Waits
	// (capacity 1 each: a notice is "look again").
	subs map[string]map[chan struct{}]struct{}
	// confirmed maps a channel being subscribed to what its confirmation
	// closes.
	confirmed map[string]chan struct{}
}

// watch subscribes to the done channel of task id and returns the
// channel its notices arrive on (also on a reconnection of the
// subscription, when a notice may have been missed), once Redis has
// confirmed the subscription: a notice published after watch returns is
// not missed. stop ends the watch.
func (h *waitHub) watch(ctx context.Context, id string) (notices chan struct{}, stop func(), err error) {
	name := h.store.Keys().Done(id)
	notices = make(chan struct{}, 1)
	h.mu.Lock()
	if h.ps == nil {
		h.ps = h.store.Subscribe(ctx)
		h.subs, h.confirmed = map[string]map[chan struct{}]struct{}{}, map[string]chan struct{}{}
		h.read = make(chan struct{})
		go h.dispatch(h.ps.ChannelWithSubscriptions(), h.read)
	}
	waiters := h.subs[name]
	first := waiters == nil
	if first {
		waiters = map[chan struct{}]struct{}{}
		h.subs[name] = waiters
		h.confirmed[name] = make(chan struct{})
	}
	waiters[notices] = struct{}{}
	confirmed, ps := h.confirmed[name], h.ps
	h.mu.Unlock()
	stop = func() { h.unwatch(name, notices) }
	if first {
		if err := ps.Subscribe(ctx, name); err != nil {
			stop()
			return nil, nil, errtext.Errorf("subscribe to the end of %q: %w", id, err)
		}
	}
	select {
	case <-confirmed:
		return notices, stop, nil
	case <-ctx.Done():
		stop()
		return nil, nil, ctx.Err()
	}
}

// unwatch ends one watch of channel name; the last one unsubscribes it,
// and the last subscription closes the connection.
func (h *waitHub) unwatch(name string, notices chan struct{}) {
	h.mu.Lock()
	waiters := h.subs[name]
	delete(waiters, notices)
	if len(waiters) > 0 {
		h.mu.Unlock()
		return
	}
	delete(h.subs, name)
	delete(h.confirmed, name)
	ps, read := h.ps, h.read
	if len(h.subs) > 0 {
		h.mu.Unlock()
		// Best effort: a channel left subscribed costs its notices only.
		_ = ps.Unsubscribe(context.Background(), name)
		return
	}
	h.ps = nil
	h.mu.Unlock()
	_ = ps.Close()
	<-read
}

// dispatch hands the connection's messages to the Waits until it is
// closed: a subscription's confirmation releases the watch waiting for
// it (and, for a channel confirmed before, says the connection was made
// again: its Waits look again), a notice wakes the channel's Waits.
func (h *waitHub) dispatch(msgs <-chan any, read chan struct{}) {
	defer close(read)
	for m := range msgs {
		var name string
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind != "subscribe" {
				continue
			}
			name = m.Channel
			h.mu.Lock()
			if c, ok := h.confirmed[name]; ok {
				select {
				case <-c:
				default:
					close(c)
				}
			}
			h.mu.Unlock()
		case *redis.Message:
			name = m.Channel
		}
		h.mu.Lock()
		for n := range h.subs[name] {
			select {
			case n <- struct{}{}:
			default: // a notice is pending already
			}
		}
		h.mu.Unlock()
	}
}
