package worker

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/fanout"
	"github.com/hourglass-sched/hourglass/internal/keyslot"
	"github.com/hourglass-sched/hourglass/internal/shard"
)

// Fetching on a Redis Cluster. One BLMPOP may name keys of one hash slot
// only, and each shard has a slot of its own, so the worker cannot block
// on all its ready lists at once. Instead, per pop it groups the lists by
// the node that serves them and calls popnode.lua on each node in turn (a
// script that may touch several slots of the node it runs on), until one
// has entries. When none has, it waits for a ready announcement: the
// scripts that make a ready list non-empty SPUBLISH on the channel named
// like the list, which the worker subscribes to on each node (sharded
// pub/sub; internal/fanout keeps one connection per node). So an idle
// worker sends nothing until a task is ready, and what it sends are short
// script calls on the cluster client's pooled connections: connections
// grow with nodes, not with shards (docs/topologies.md).

// popper pops at most count entries from the first non-empty list of
// ring's keys (rotated), waiting up to timeout for one; nothing on
// timeout.
type popper interface {
	pop(ctx context.Context, ring *readyRing, count int, timeout time.Duration) (string, []string, error)
}

// Short waits before a pop is tried again: movedRetry when some of its
// lists were on a node that no longer serves them (a slot migration in
// progress, or a slot map not yet reloaded), failedRetry when some nodes
// did not answer while others did (a primary is down until its replica is
// promoted: the other nodes' tasks keep flowing meanwhile).
const (
	movedRetry  = 100 * time.Millisecond
	failedRetry = 500 * time.Millisecond
)

// nodeErrorLog bounds how often the failure of one node is logged.
const nodeErrorLog = 10 * time.Second

// clusterPopper is the popper on a Redis Cluster.
type clusterPopper struct {
	cc    *redis.ClusterClient
	store *shard.Store
	log   hclog.Logger
	hub   *fanout.Hub
	subs  []*fanout.Subscription

	mu      sync.Mutex
	waiters map[string]map[*readyRing]struct{} // by ready-list key
	slots   map[string]int                     // hash slot by key, cached
	warned  map[string]bool                    // keys whose pop failed, logged once
	logged  map[string]time.Time               // when a node's failure was last logged
	// subscribed holds the keys whose announcements are subscribed, on
	// ctx (the fetch's); pops in flight at once (one per ring) take
	// subsMu for it and subs.
	subsMu     sync.Mutex
	subscribed map[string]bool
	ctx        context.Context
}

// newClusterPopper subscribes to the ready announcements of keys (every
// ready list the worker may pop) and returns the popper; close ends the
// subscriptions.
func newClusterPopper(ctx context.Context, cc *redis.ClusterClient, store *shard.Store, log hclog.Logger, keys []string) *clusterPopper {
	p := &clusterPopper{
		cc: cc, store: store, log: log,
		hub:        fanout.New(cc, fanout.Sharded, log),
		waiters:    map[string]map[*readyRing]struct{}{},
		slots:      map[string]int{},
		warned:     map[string]bool{},
		logged:     map[string]time.Time{},
		subscribed: map[string]bool{},
	}
	p.ctx = ctx
	p.subscribe(keys)
	return p
}

// subscribe subscribes to the ready announcements of those of keys not
// subscribed yet (new shards, after a change of the shard count). Called
// by one pop at a time (register), never with p.mu held: the hub's
// callbacks take it.
func (p *clusterPopper) subscribe(keys []string) {
	for _, k := range keys {
		p.subsMu.Lock()
		done := p.subscribed[k]
		p.subscribed[k] = true
		p.subsMu.Unlock()
		if done {
			continue
		}
		sub := p.hub.Subscribe(p.ctx, shard.ReadyChannel(k), func(e fanout.Event) {
			if e.Subscribed {
				// Announcements may have been lost while the channel was
				// not subscribed: every waiter pops again.
				p.wakeAll()
				return
			}
			p.wake(k)
		})
		p.subsMu.Lock()
		p.subs = append(p.subs, sub)
		p.subsMu.Unlock()
	}
}

func (p *clusterPopper) close() {
	p.subsMu.Lock()
	defer p.subsMu.Unlock()
	for _, s := range p.subs {
		s.Close()
	}
	p.hub.Close()
}

func (p *clusterPopper) pop(ctx context.Context, ring *readyRing, count int, timeout time.Duration) (string, []string, error) {
	p.register(ring)
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		// An announcement that arrives while this pop runs leaves a
		// signal pending on ring.wake: the wait below then ends at once
		// and the lists are popped again.
		key, entries, soon, err := p.popOnce(ctx, ring.rotated(), ring.hint.Swap(nil), count)
		if err != nil || len(entries) > 0 {
			return key, entries, err
		}
		var retry *time.Timer
		if soon > 0 {
			retry = time.NewTimer(soon)
		}
		if p.wait(ctx, deadline.C, ring.wake, retry) {
			return "", nil, nil
		}
	}
}

// wait waits for a wake-up, or for retry (if not nil), and reports
// whether ctx or the deadline ended the wait instead.
func (p *clusterPopper) wait(ctx context.Context, deadline <-chan time.Time, wake <-chan struct{}, retry *time.Timer) bool {
	var retryC <-chan time.Time
	if retry != nil {
		defer retry.Stop()
		retryC = retry.C
	}
	select {
	case <-ctx.Done():
		return true
	case <-deadline:
		return true
	case <-wake:
	case <-retryC:
	}
	return false
}

// popOnce calls popnode.lua on each node that serves some of keys, in the
// order of their first key (the node of hint first, with hint first among
// its keys: the list last announced), until one returns entries. A node that fails
// is skipped: err is returned only when every node failed. soon, when not
// zero, is how soon to try again rather than wait for an announcement:
// some lists were on a node that no longer serves them, or some node
// failed; the slot map is reloaded then.
func (p *clusterPopper) popOnce(ctx context.Context, keys []string, hint *string, count int) (key string, entries []string, soon time.Duration, err error) {
	groups := p.byNode(ctx, keys)
	if hint != nil {
		hintFirst(groups, *hint)
	}
	failed := 0
	for _, group := range groups {
		r, perr := p.store.PopNode(ctx, group.keys, count)
		if perr != nil {
			if ctx.Err() != nil {
				return "", nil, 0, perr
			}
			failed++
			err = perr
			p.nodeFailed(group.node, perr)
			soon = pick(soon, failedRetry)
			p.cc.ReloadState(ctx)
			continue
		}
		if len(r.NonLocal) > 0 {
			soon = pick(soon, movedRetry)
			p.cc.ReloadState(ctx)
		}
		p.warnFailed(r.Failed)
		if len(r.Entries) > 0 {
			return r.Key, r.Entries, 0, nil
		}
	}
	if failed < len(groups) {
		err = nil
	}
	return "", nil, soon, err
}

// hintFirst moves the group holding key hint to the front, and hint to
// the front of that group's keys.
func hintFirst(groups []nodeKeys, hint string) {
	for g := range groups {
		if i := slices.Index(groups[g].keys, hint); i >= 0 {
			keys := groups[g].keys
			copy(keys[1:i+1], keys[:i])
			keys[0] = hint
			first := groups[g]
			copy(groups[1:g+1], groups[:g])
			groups[0] = first
			return
		}
	}
}

// pick returns the shorter of two waits, 0 meaning none yet.
func pick(a, b time.Duration) time.Duration {
	if a == 0 || b < a {
		return b
	}
	return a
}

// nodeFailed logs the failed pop of a node, at most once per nodeErrorLog.
func (p *clusterPopper) nodeFailed(node string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.logged[node]) < nodeErrorLog {
		return
	}
	p.logged[node] = time.Now()
	p.log.Warn("cannot pop from a cluster node; its lists are tried again, the other nodes' meanwhile", "node", node, "error", err)
}

// nodeKeys are the keys of one node.
type nodeKeys struct {
	node string
	keys []string
}

// byNode splits keys into groups served by one primary each, as the
// client's slot map has it, keeping their order.
func (p *clusterPopper) byNode(ctx context.Context, keys []string) []nodeKeys {
	p.mu.Lock()
	defer p.mu.Unlock()
	nodeOfSlot := map[int]string{}
	index := map[string]int{}
	var groups []nodeKeys
	for _, k := range keys {
		slot, ok := p.slots[k]
		if !ok {
			slot = keyslot.Of(k)
			p.slots[k] = slot
		}
		node, ok := nodeOfSlot[slot]
		if !ok {
			if c, err := p.cc.MasterForKey(ctx, k); err == nil {
				node = c.Options().Addr
			} // else: "" groups the keys whose node is unknown; the script call finds it
			nodeOfSlot[slot] = node
		}
		i, ok := index[node]
		if !ok {
			i = len(groups)
			index[node] = i
			groups = append(groups, nodeKeys{node: node})
		}
		groups[i].keys = append(groups[i].keys, k)
	}
	return groups
}

func (p *clusterPopper) warnFailed(failed map[string]string) {
	if len(failed) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, why := range failed {
		if !p.warned[k] {
			p.warned[k] = true
			p.log.Warn("cannot pop a ready list; skipping it", "key", k, "error", why)
		}
	}
}

// register makes ring hear the announcements of its keys, once: its
// wake channel receives a signal (and hint the key) when one of them is
// announced, or when the channels are subscribed again.
func (p *clusterPopper) register(ring *readyRing) {
	if ring.wake != nil {
		return // a ring is used by one pop at a time
	}
	p.subscribe(ring.keys)
	p.mu.Lock()
	defer p.mu.Unlock()
	ring.wake = make(chan struct{}, 1)
	for _, k := range ring.keys {
		rs := p.waiters[k]
		if rs == nil {
			rs = map[*readyRing]struct{}{}
			p.waiters[k] = rs
		}
		rs[ring] = struct{}{}
	}
}

func (p *clusterPopper) wake(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for r := range p.waiters[key] {
		r.hint.Store(&key)
		notify(r.wake)
	}
}

func (p *clusterPopper) wakeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, rs := range p.waiters {
		for r := range rs {
			notify(r.wake)
		}
	}
}

// notify sends on ch unless a signal is already pending.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
