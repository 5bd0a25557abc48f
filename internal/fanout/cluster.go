package fanout

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/redis/go-redis/v9"
)

// Health check of a node connection: after pingAfter without anything
// from the node the loop sends a PING, and a node that then sends nothing
// (not even the PONG) within pongWithin is given up. A paused node, or one
// behind a dead link, is so noticed at most pingAfter+pongWithin after it
// last spoke; a killed one at once (its socket is reset).
const (
	pingAfter  = time.Second
	pongWithin = 2 * time.Second
)

var (
	errNoOwner = errors.New("fanout: the cluster named no primary for the channel")
	errNoPong  = errors.New("fanout: no reply to PING")
	errRetired = errors.New("fanout: no channel left on the node")
)

// retryMax caps the backoff between a node's sessions and between
// look-ups of a moved channel's owner: after a primary's death its
// replica is promoted within a few seconds, and a slower retry would add
// up to its own length to the time its channels stay unsubscribed. A
// dead node costs one refused dial and one slot map reload per retry.
const retryMax = time.Second

// nodeSet is a Hub's sharded pub/sub on a Redis Cluster: one connection
// per primary that owns a subscribed channel's slot, each channel
// subscribed with an SSUBSCRIBE of its own (one may name channels of one
// slot only).
//
// Each node's connection has a loop goroutine (node.run) that reads it
// and owns its reconnects: go-redis would re-subscribe a PubSub's shard
// channels in one SSUBSCRIBE, refused with CROSSSLOT when they span
// slots, so a PubSub that failed in any way is closed, never read again,
// and replaced by a new one after a backoff, on which each channel is
// subscribed again, once its owner was looked up again (a slot map
// reload is requested first: the node may have died and its replica
// taken over). A channel that Redis unsubscribes (its slot moved away) or
// whose SSUBSCRIBE was answered with MOVED or ASK is looked up again
// after a backoff and subscribed on its owner's connection, the others of
// the node undisturbed.
//
// Lifecycles: a node's loop is started when a channel is first routed to
// its address and ends when the node has no channel left: its loop ends
// itself when it routed its last channel elsewhere; the Subscription that
// closes the last one stops it (cancel, close the PubSub) and waits for
// it. Hub.Close stops every loop and waits for them and for the
// background SUNSUBSCRIBEs (wg).
type nodeSet struct {
	cc  *redis.ClusterClient
	log hclog.Logger

	// deliver is held while listeners are called, so that one listener
	// is called by one goroutine at a time even while its channel moves
	// from one node's loop to another's, and so that a closed
	// Subscription's Close can wait for an event being delivered.
	deliver sync.Mutex

	mu     sync.Mutex
	chans  map[string]*shardChan // subscribed channels
	byAddr map[string]*node      // each node's connection; "" holds the channels of no known owner
	wg     sync.WaitGroup        // node loops and background SUNSUBSCRIBEs
}

// shardChan is one subscribed channel: its listeners and the node it is
// routed to.
type shardChan struct {
	subs []*Subscription // never changed in place, only replaced
	node *node
}

// node is one primary's pub/sub connection, or, with addr "", a place for
// channels whose owner could not be looked up (its loop looks them up
// again until it can hand them to a node).
type node struct {
	ns     *nodeSet
	addr   string
	client *redis.Client // the cluster client's client of addr; used by the loop only after start
	chans  map[string]struct{}
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when run returns

	// io orders the SSUBSCRIBE and SUNSUBSCRIBE writes: a session's
	// first subscriptions, a channel's SSUBSCRIBE and its last
	// SUNSUBSCRIBE (which re-checks under io that the channel is still
	// gone), so that they reach Redis in the order they were decided.
	io sync.Mutex
	mu sync.Mutex    // guards ps
	ps *redis.PubSub // the current session's; nil between sessions
	// pending counts background SUNSUBSCRIBEs; stop waits for them.
	pending sync.WaitGroup
}

func newNodeSet(cc *redis.ClusterClient, log hclog.Logger) *nodeSet {
	return &nodeSet{cc: cc, log: log, chans: map[string]*shardChan{}, byAddr: map[string]*node{}}
}

// owner returns the address and client of the primary that serves
// channel's slot in the cluster client's slot map, or "" and nil.
func (ns *nodeSet) owner(ctx context.Context, channel string) (string, *redis.Client) {
	c, err := ns.cc.MasterForKey(ctx, channel)
	if err != nil {
		ns.log.Warn("no primary known for the channel; looking again", "channel", channel, "error", err)
		return "", nil
	}
	return c.Options().Addr, c
}

// nodeLocked returns the node of addr, starting it if there is none.
// Called with ns.mu held.
func (ns *nodeSet) nodeLocked(addr string, client *redis.Client) *node {
	if n := ns.byAddr[addr]; n != nil {
		return n
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &node{ns: ns, addr: addr, client: client, chans: map[string]struct{}{}, ctx: ctx, cancel: cancel, done: make(chan struct{})}
	ns.byAddr[addr] = n
	ns.wg.Add(1)
	go n.run()
	return n
}

func (ns *nodeSet) subscribe(ctx context.Context, h *Hub, channel string, fn Listener) *Subscription {
	s := &Subscription{h: h, channel: channel, fn: fn}
	ns.mu.Lock()
	sc := ns.chans[channel]
	if sc == nil {
		ns.mu.Unlock()
		addr, client := ns.owner(ctx, channel) // may read the slot map
		ns.mu.Lock()
		if sc = ns.chans[channel]; sc == nil {
			n := ns.nodeLocked(addr, client)
			sc = &shardChan{node: n}
			ns.chans[channel] = sc
			n.chans[channel] = struct{}{}
		}
	}
	sc.subs = append(slices.Clip(sc.subs), s)
	n := sc.node
	ns.mu.Unlock()
	// As on the other routes: SSUBSCRIBE again even if the channel was
	// subscribed, so that the new listener hears a confirmation.
	n.subscribe(ctx, channel)
	return s
}

func (ns *nodeSet) unsubscribe(s *Subscription) {
	ns.mu.Lock()
	sc := ns.chans[s.channel]
	if sc == nil || !slices.Contains(sc.subs, s) {
		ns.mu.Unlock() // the Hub was closed
		return
	}
	sc.subs = slices.DeleteFunc(slices.Clone(sc.subs), func(x *Subscription) bool { return x == s })
	n := sc.node
	var stop, unsub bool
	if len(sc.subs) == 0 {
		delete(ns.chans, s.channel)
		delete(n.chans, s.channel)
		switch {
		case len(n.chans) == 0 && ns.byAddr[n.addr] == n:
			delete(ns.byAddr, n.addr)
			stop = true
		case len(n.chans) > 0:
			unsub = true
			ns.wg.Add(1)
			n.pending.Add(1)
		}
	}
	ns.mu.Unlock()
	// An event being delivered to s ends before Close returns.
	ns.deliver.Lock()
	ns.deliver.Unlock() // empty on purpose: waits for the delivery in progress
	switch {
	case stop:
		n.stop()
	case unsub:
		// In the background: Close never waits for Redis.
		go func() {
			defer ns.wg.Done()
			defer n.pending.Done()
			n.unsubscribe(s.channel)
		}()
	}
}

// assigned reports whether channel is subscribed and routed to n.
func (ns *nodeSet) assigned(channel string, n *node) bool {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	sc := ns.chans[channel]
	return sc != nil && sc.node == n
}

// channelsOf returns the channels routed to n.
func (ns *nodeSet) channelsOf(n *node) []string {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	out := make([]string, 0, len(n.chans))
	for ch := range n.chans {
		out = append(out, ch)
	}
	slices.Sort(out)
	return out
}

// move routes channel from n to the node of addr, if it is still
// subscribed and routed to n, and returns that node (nil otherwise).
func (ns *nodeSet) move(channel string, from *node, addr string, client *redis.Client) *node {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	sc := ns.chans[channel]
	if sc == nil || sc.node != from {
		return nil
	}
	to := ns.nodeLocked(addr, client)
	sc.node = to
	delete(from.chans, channel)
	to.chans[channel] = struct{}{}
	return to
}

// retire reports whether n has no channel left, and if so takes it out
// of the set: its loop then returns.
func (ns *nodeSet) retire(n *node) bool {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if len(n.chans) > 0 {
		return false
	}
	if ns.byAddr[n.addr] == n {
		delete(ns.byAddr, n.addr)
	}
	return true
}

// send hands e to the listeners of channel, if it is routed to n (an
// event of the node it just left is dropped: the new node's
// confirmation follows).
func (ns *nodeSet) send(n *node, channel string, e Event) {
	ns.deliver.Lock()
	defer ns.deliver.Unlock()
	ns.mu.Lock()
	var subs []*Subscription
	if sc := ns.chans[channel]; sc != nil && sc.node == n {
		subs = sc.subs
	}
	ns.mu.Unlock()
	for _, s := range subs {
		s.fn(e)
	}
}

// conns returns how many node connections the set holds.
func (ns *nodeSet) conns() int {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	n := len(ns.byAddr)
	if ns.byAddr[""] != nil {
		n-- // no connection
	}
	return n
}

// close stops every node and waits for their loops and background
// SUNSUBSCRIBEs.
func (ns *nodeSet) close() {
	ns.mu.Lock()
	nodes := make([]*node, 0, len(ns.byAddr))
	for _, n := range ns.byAddr {
		nodes = append(nodes, n)
	}
	for _, sc := range ns.chans {
		clear(sc.node.chans) // a retired node's loop may still run: it finds nothing to move
	}
	ns.byAddr = map[string]*node{}
	ns.chans = map[string]*shardChan{}
	ns.mu.Unlock()
	var halts sync.WaitGroup
	for _, n := range nodes {
		halts.Go(n.halt) // together: each may wait for a dial (see halt)
	}
	halts.Wait()
	ns.wg.Wait()
}
