package shard

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Store runs Hourglass's scripts against one Redis deployment. Its
// methods are grouped by role: queue policies (policy.go), enqueue,
// cancel and lookup (tasks.go), the mover and epochs (move.go), a
// delivery's life in a worker (delivery.go, settle.go) and the owner's
// recovery (recover.go). It is safe for concurrent use.
type Store struct {
	rdb redis.UniversalClient
	// k names the keys, which do not depend on the shard count; cur is
	// the current layout (SetLayout), base the one the store was made
	// with (the layout without a record).
	k    Keys
	base *Layout
	cur  *atomic.Pointer[Layout]
	// follower is the store's Follower, if one was made (Follow): it
	// hears of every layout the store adopts. Shared by the copies of
	// the store (WithDurability).
	follower *atomic.Pointer[Follower]
	wait     Durability
	// names caches interned queue names (task data version 2), shared
	// by the copies of the store; encoding is what RegisterQueues asks
	// for (SetTaskEncoding).
	names    *queueNames
	encoding TaskEncoding
	// compact is set while the namespace writes encoding version 2, as
	// the last registration found it (StagingAllowed).
	compact *atomic.Bool
}

// Durability asks Redis to confirm that the enqueues of a call, stored or
// found stored, reached Replicas replicas within Timeout (at least a
// millisecond); one not confirmed so reports ErrNotReplicated. After the
// call, one more round trip writes a counter (Layout.WaitMark) and WAITs
// on that connection: replication is one ordered stream, so a replica
// that has the counter's write has every earlier write of the primary,
// whichever connection made it (a duplicate's original store included).
// The zero value waits for nothing. It needs a single primary
// (standalone or Sentinel): a Redis Cluster has one stream per node.
type Durability struct {
	Replicas int
	Timeout  time.Duration
}

// waitReplicas writes the wait mark and WAITs for s.wait.Replicas, and
// reports whether they confirmed it in time.
func (s *Store) waitReplicas(ctx context.Context) bool {
	pipe := s.rdb.Pipeline()
	pipe.Incr(ctx, s.k.WaitMark())
	wait := redis.NewIntCmd(ctx, "wait", s.wait.Replicas, max(s.wait.Timeout.Milliseconds(), 1))
	_ = pipe.Process(ctx, wait)
	_, err := pipe.Exec(ctx)
	return err == nil && wait.Val() >= int64(s.wait.Replicas)
}

// replicated returns nil, or, when s waits for replicas (WithDurability)
// and they did not confirm the write just made in time, an error wrapping
// ErrNotReplicated that names it.
func (s *Store) replicated(ctx context.Context, what string) error {
	if s.wait.Replicas <= 0 || s.waitReplicas(ctx) {
		return nil
	}
	return fmt.Errorf("%w: %s (WAIT %d replicas, %s)", ErrNotReplicated, what, s.wait.Replicas, s.wait.Timeout)
}

// WithDurability returns a copy of s whose enqueues (and changes,
// debounced calls) wait as d says.
func (s *Store) WithDurability(d Durability) *Store {
	c := *s
	c.wait = d
	return &c
}

// NewStore returns a Store for layout l on rdb.
func NewStore(rdb redis.UniversalClient, l Layout) *Store {
	s := &Store{rdb: rdb, k: l.Keys, base: &l, cur: new(atomic.Pointer[Layout]), follower: new(atomic.Pointer[Follower]), names: &queueNames{}, compact: new(atomic.Bool)}
	s.cur.Store(&l)
	return s
}

// Layout returns the store's current layout (SetLayout). Its key names
// are those of every layout of the namespace.
func (s *Store) Layout() Layout { return *s.cur.Load() }
