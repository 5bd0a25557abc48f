// Package fanout shares Redis pub/sub connections among the listeners of
// one process. A Hub subscribes each channel once, on a connection it
// opens when the first channel routed to that connection is subscribed
// and closes when the last one is gone, and hands every message, and every
// (re)subscription confirmation, to the channel's listeners.
//
// Two users share it: the scheduler's wake-ups (internal/scan, sharded
// pub/sub, one channel per owned shard) and the blocked acquirers of the
// coord primitives (classic pub/sub, one channel per primitive).
//
// Routing: a Hub keeps one connection per route. A plain client has one
// route; a Ring routes a channel to the shard of its name, as it routes
// keys, so there each channel gets a connection of its own. On a Redis
// Cluster, classic channels share one connection (PUBLISH reaches every
// node), and sharded ones get one connection per primary that owns a
// subscribed channel's slot, each channel subscribed with an SSUBSCRIBE of
// its own (one may name channels of one slot only), so connections grow
// with the primaries, not with the slots or shards. When a slot moves
// while subscribed, Redis unsubscribes its channels; the hub then looks
// their owner up again and subscribes them on its connection (the node's
// other channels are not disturbed).
//
// Reconnects: on a plain client, a Ring, and for a cluster's classic
// channels, go-redis re-subscribes a connection's channels when it
// reconnects, and a failed SUBSCRIBE is kept and sent again then. On a cluster, sharded connections reconnect by
// themselves (go-redis would re-send all of a connection's channels in one
// SSUBSCRIBE, refused when they span slots): a failed connection is
// closed and, after a backoff, each of its channels' owner is looked up
// again (the node may have died and its replica taken over) and the
// channel subscribed on that owner's connection. They are health checked:
// a PING after pingAfter (1 s) of silence, given up when the node sends
// nothing for pongWithin (2 s) more, so a paused or unreachable node is
// noticed within 3 s, a killed one at once. Each confirmation reaches the
// listeners as an Event with Subscribed set: messages published while the
// subscription was not in place are lost, so a listener re-checks
// whatever it waits for. The other connections are PINGed by go-redis
// after HealthCheck (1 min) of silence.
package fanout

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/redis/go-redis/v9"
)

// Kind is a pub/sub flavour.
type Kind int

const (
	// Classic is SUBSCRIBE / PUBLISH.
	Classic Kind = iota
	// Sharded is SSUBSCRIBE / SPUBLISH (Redis 7): a message stays on the
	// node that owns the channel's slot.
	Sharded
)

// Event is what a listener receives: a message's payload, or, with
// Subscribed set, Redis's confirmation that the channel is (again)
// subscribed.
type Event struct {
	Payload    string
	Subscribed bool
}

// Listener receives a channel's events in order, from the goroutine that
// reads the channel's connection, never from two goroutines at once. It
// must not block, nor close a Subscription (closing one waits for an
// event being delivered or for that goroutine).
type Listener func(Event)

// sendTimeout bounds one SUBSCRIBE or UNSUBSCRIBE write.
const sendTimeout = 5 * time.Second

// HealthCheck is how long a plain client's, a Ring's or a cluster's
// classic connection stays silent before go-redis PINGs it (go-redis's
// default is 3 s). A connection Redis closed, or that Redis lost (killed,
// restarted), fails its read at once and is re-subscribed without a PING;
// the PING finds one whose far end vanished without a word (a host that
// rebooted answers it with a reset), so it bounds how long such a
// connection's messages can go missing before the listeners hear a new
// confirmation and re-check. An idle connection costs Redis one PING per
// HealthCheck: the wake-up subscriptions' movers back their own
// re-checks off on this bound (internal/scan).
const HealthCheck = time.Minute

// Hub multiplexes subscriptions over shared pub/sub connections. It is
// safe for concurrent use. Each connection is owned by the hub: opened by
// the first Subscribe routed to it, closed (and its dispatch goroutine, or
// on a cluster's sharded route its loop, waited for) when its last
// Subscription is closed, or by Close. A cluster's sharded connection
// whose channels all moved to other nodes closes by itself.
type Hub struct {
	rdb  redis.UniversalClient
	kind Kind
	log  hclog.Logger

	mu    sync.Mutex
	conns map[string]*conn // by route

	// nodes holds the connections of sharded pub/sub on a Redis Cluster
	// (cluster.go); nil otherwise, when conns holds them.
	nodes *nodeSet
}

// conn is one pub/sub connection and the listeners of its channels.
type conn struct {
	// ready is closed once ps is set and dispatch runs (by the Subscribe
	// that created the conn, outside Hub.mu: opening may do I/O).
	ready chan struct{}
	ps    *redis.PubSub // nil if no connection could be opened (see open)
	done  chan struct{} // closed when dispatch returns
	refs  int           // subscriptions on it, guarded by Hub.mu

	// io serialises a channel's SUBSCRIBEs (with the change of subs
	// that precedes each) and its last UNSUBSCRIBE (which re-checks subs
	// under io), so that they reach Redis in the order they were decided.
	io sync.Mutex
	mu sync.Mutex // guards subs and closed
	// subs holds each channel's listeners. A slice is never changed in
	// place, only replaced, so dispatch can use it without the lock.
	subs   map[string][]*Subscription
	closed bool // close has begun: no UNSUBSCRIBE is sent any more
	// pending counts background UNSUBSCRIBEs; close waits for them.
	pending sync.WaitGroup
}

// Subscription is one listener on one channel. Close it when done.
type Subscription struct {
	h       *Hub
	c       *conn  // nil on a nodeSet
	route   string // on c
	channel string
	fn      Listener
	once    sync.Once
}

// New returns a Hub on rdb for pub/sub of the given kind. log (may be
// nil) receives failed subscribe writes.
func New(rdb redis.UniversalClient, kind Kind, log hclog.Logger) *Hub {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	h := &Hub{rdb: rdb, kind: kind, log: log, conns: map[string]*conn{}}
	if cc, ok := rdb.(*redis.ClusterClient); ok && kind == Sharded {
		h.nodes = newNodeSet(cc, log)
	}
	return h
}

// route names the connection that channel is subscribed on (sharded
// channels on a cluster are routed by h.nodes instead).
func (h *Hub) route(channel string) string {
	if _, ok := h.rdb.(*redis.Ring); ok {
		return channel // a Ring picks the shard by the channel's name
	}
	return "" // classic messages reach every node of a cluster
}

// Subscribe calls fn with every event of channel until the returned
// Subscription is closed. It returns once the SUBSCRIBE is written, not
// confirmed: the confirmation arrives as an event, also when the channel
// already had listeners. A failed write is
// logged and not returned: the channel is subscribed again when the
// connection is back, and that confirmation reaches fn.
func (h *Hub) Subscribe(ctx context.Context, channel string, fn Listener) *Subscription {
	if h.nodes != nil {
		return h.nodes.subscribe(ctx, h, channel, fn)
	}
	r := h.route(channel)
	h.mu.Lock()
	c := h.conns[r]
	create := c == nil
	if create {
		c = &conn{ready: make(chan struct{}), done: make(chan struct{}), subs: map[string][]*Subscription{}}
		h.conns[r] = c
	}
	c.refs++
	h.mu.Unlock()
	if create {
		h.open(c, channel)
	}
	<-c.ready

	s := &Subscription{h: h, c: c, route: r, channel: channel, fn: fn}
	c.io.Lock()
	defer c.io.Unlock()
	c.mu.Lock()
	c.subs[channel] = append(slices.Clip(c.subs[channel]), s)
	c.mu.Unlock()
	// A listener needs a confirmation of its own, delivered after it
	// joined: the channel's earlier one (of another listener, or of the
	// SUBSCRIBE that opened a routed connection) may have gone by
	// already. SUBSCRIBE again, which Redis confirms again; the other
	// listeners hear one more confirmation, which only makes them
	// re-check.
	sctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	if err := h.send(sctx, c.ps, true, channel); err != nil {
		h.log.Warn("subscribe failed; go-redis subscribes again when it reconnects", "channel", channel, "error", err)
	}
	return s
}

// Signal subscribes channel and returns a channel that receives a signal
// for every event (a message or a confirmation), with a buffer of one:
// bursts coalesce and a slow receiver never blocks the connection. observe
// (may be nil) sees each event first. The returned function ends the
// subscription; it is idempotent.
func (h *Hub) Signal(ctx context.Context, channel string, observe Listener) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	sub := h.Subscribe(ctx, channel, func(e Event) {
		if observe != nil {
			observe(e)
		}
		select {
		case ch <- struct{}{}:
		default: // a signal is already pending
		}
	})
	return ch, sub.Close
}

// open sets c's PubSub, starts its dispatch goroutine and marks c ready.
// For a plain client or a cluster's classic channels it does no I/O
// (go-redis dials on first use). A Ring needs the channel to pick its
// server, and subscribes to it at once; when the Ring has no live shard (go-redis panics then) c
// stays without a connection: its listeners hear nothing until their
// subscriptions close and a later Subscribe opens a new one.
func (h *Hub) open(c *conn, channel string) {
	defer close(c.ready)
	if r, ok := h.rdb.(routed); ok && h.route(channel) != "" {
		c.ps = h.openRouted(r, channel)
	} else if h.kind == Sharded {
		c.ps = h.rdb.SSubscribe(context.Background())
	} else {
		c.ps = h.rdb.Subscribe(context.Background())
	}
	if c.ps == nil {
		close(c.done)
		return
	}
	go c.dispatch(c.ps.ChannelWithSubscriptions(redis.WithChannelSize(256), redis.WithChannelHealthCheckInterval(HealthCheck)))
}

// routed is a client that picks a connection's server by the channels
// it is opened with: a Ring (by name).
type routed interface {
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
	SSubscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// openRouted opens a connection subscribed to channel on the server its
// route names.
func (h *Hub) openRouted(r routed, channel string) (ps *redis.PubSub) {
	defer func() {
		if p := recover(); p != nil {
			h.log.Error("no live server to subscribe on; listeners hear nothing until they subscribe again", "channel", channel, "error", p)
			ps = nil
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), sendTimeout)
	defer cancel()
	if h.kind == Sharded {
		return r.SSubscribe(ctx, channel)
	}
	return r.Subscribe(ctx, channel)
}

func (h *Hub) send(ctx context.Context, ps *redis.PubSub, subscribe bool, channel string) error {
	switch {
	case ps == nil:
		return nil // no connection (see open)
	case h.kind == Sharded && subscribe:
		return ps.SSubscribe(ctx, channel)
	case h.kind == Sharded:
		return ps.SUnsubscribe(ctx, channel)
	case subscribe:
		return ps.Subscribe(ctx, channel)
	default:
		return ps.Unsubscribe(ctx, channel)
	}
}

// dispatch hands messages and subscription confirmations to listeners
// until the PubSub is closed.
func (c *conn) dispatch(ch <-chan any) {
	defer close(c.done)
	for m := range ch {
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" || m.Kind == "ssubscribe" {
				c.deliver(m.Channel, Event{Subscribed: true})
			}
		case *redis.Message:
			c.deliver(m.Channel, Event{Payload: m.Payload})
		}
	}
}

func (c *conn) deliver(channel string, e Event) {
	c.mu.Lock()
	subs := c.subs[channel]
	c.mu.Unlock()
	for _, s := range subs {
		s.fn(e)
	}
}

// Close stops the subscription: fn is not called after Close returns,
// except for an event already being delivered. The channel is
// unsubscribed when its last listener closes, and the connection closed
// with its last channel. Close is idempotent.
func (s *Subscription) Close() {
	s.once.Do(s.close)
}

func (s *Subscription) close() {
	if s.h.nodes != nil {
		s.h.nodes.unsubscribe(s)
		return
	}
	c, h := s.c, s.h
	c.mu.Lock()
	subs := slices.DeleteFunc(slices.Clone(c.subs[s.channel]), func(x *Subscription) bool { return x == s })
	if len(subs) == 0 {
		delete(c.subs, s.channel)
	} else {
		c.subs[s.channel] = subs
	}
	unsub := len(subs) == 0 && !c.closed
	if unsub {
		c.pending.Add(1) // while this subscription still holds its ref: close waits for it
	}
	c.mu.Unlock()

	h.mu.Lock()
	c.refs--
	last := c.refs == 0 && h.conns[s.route] == c
	if last {
		delete(h.conns, s.route)
	}
	h.mu.Unlock()
	switch {
	case last:
		if unsub {
			c.pending.Done() // closing the connection ends its subscriptions
		}
		c.close()
	case unsub:
		// The UNSUBSCRIBE goes out in the background: Close never waits
		// for Redis (which may be down for a while).
		go func() {
			defer c.pending.Done()
			c.unsubscribe(h, s.channel)
		}()
	}
}

// unsubscribe sends channel's UNSUBSCRIBE unless it was subscribed again
// meanwhile (under io, so that it cannot overtake that SUBSCRIBE) or the
// connection is closing. Best effort: a failed unsubscribe only costs
// ignored messages.
func (c *conn) unsubscribe(h *Hub, channel string) {
	c.io.Lock()
	defer c.io.Unlock()
	c.mu.Lock()
	still := len(c.subs[channel]) == 0 && !c.closed
	c.mu.Unlock()
	if !still {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), sendTimeout)
	defer cancel()
	_ = h.send(ctx, c.ps, false, channel)
}

// close closes the PubSub (which fails an UNSUBSCRIBE in flight at once)
// and waits for the background UNSUBSCRIBEs and dispatch to return.
func (c *conn) close() {
	<-c.ready
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	if c.ps != nil {
		_ = c.ps.Close()
	}
	c.pending.Wait()
	<-c.done
}

// Close closes every connection and waits for their dispatch goroutines;
// subscriptions still open receive nothing more. The Hub can be used
// again afterwards: a later Subscribe opens a new connection.
func (h *Hub) Close() {
	h.mu.Lock()
	conns := h.conns
	h.conns = map[string]*conn{}
	h.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
	if h.nodes != nil {
		h.nodes.close()
	}
}

// Conns returns how many connections the hub holds open (for tests and
// metrics).
func (h *Hub) Conns() int {
	if h.nodes != nil {
		return h.nodes.conns()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.conns)
}
