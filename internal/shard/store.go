package shard

import (
	"time"

	"github.com/redis/go-redis/v9"
)

// Store runs Hourglass's scripts against one Redis deployment. Its
// methods are grouped by role: queue policies (policy.go), enqueue,
// cancel and lookup (tasks.go), the mover and epochs (move.go), a
// delivery's life in a worker (delivery.go, settle.go) and the owner's
// recovery (recover.go). It is safe for concurrent use.
type Store struct {
	rdb  redis.UniversalClient
	l    Layout
	wait Durability
}

// Durability asks Redis to confirm, with WAIT on the connection that
// carried them, that the enqueues of a call reached Replicas replicas
// within Timeout; an enqueue not confirmed so reports ErrNotReplicated.
// The zero value waits for nothing. It needs a single primary
// (standalone or Sentinel): on a Redis Cluster one pipeline spans
// several nodes and WAIT reaches one of them only.
type Durability struct {
	Replicas int
	Timeout  time.Duration
}

// WithDurability returns a copy of s whose enqueues wait as d says.
func (s *Store) WithDurability(d Durability) *Store {
	c := *s
	c.wait = d
	return &c
}

// NewStore returns a Store for layout l on rdb.
func NewStore(rdb redis.UniversalClient, l Layout) *Store { return &Store{rdb: rdb, l: l} }

// Layout returns the store's key layout.
func (s *Store) Layout() Layout { return s.l }
