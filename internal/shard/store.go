package shard

import "github.com/redis/go-redis/v9"

// Store runs Hourglass's scripts against one Redis deployment. Its
// methods are grouped by role: queue policies (policy.go), enqueue,
// cancel and lookup (tasks.go), the mover and epochs (move.go), a
// delivery's life in a worker (delivery.go, settle.go) and the owner's
// recovery (recover.go). It is safe for concurrent use.
type Store struct {
	rdb redis.UniversalClient
	l   Layout
}

// NewStore returns a Store for layout l on rdb.
func NewStore(rdb redis.UniversalClient, l Layout) *Store { return &Store{rdb: rdb, l: l} }

// Layout returns the store's key layout.
func (s *Store) Layout() Layout { return s.l }
