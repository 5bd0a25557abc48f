package shard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// ErrNodeDown reports a Redis node that did not answer a PING (PingShards).
var ErrNodeDown = errors.New("hourglass: redis node not answering")

// NodeDownError names a node PingShards could not reach and the shards
// it serves. It wraps ErrNodeDown.
type NodeDownError struct {
	// Addr is the node's address ("" on a single Redis: the client's).
	Addr string
	// Shards are the shards of the call the node serves.
	Shards []int
	Err    error
}

func (e *NodeDownError) Error() string {
	where := "redis"
	if e.Addr != "" {
		where = "redis node " + e.Addr
	}
	return fmt.Sprintf("%s (serving shards %s): %v", where, intList(e.Shards), e.Err)
}

// Unwrap returns ErrNodeDown and the PING's error.
func (e *NodeDownError) Unwrap() []error { return []error{ErrNodeDown, e.Err} }

func intList(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ",")
}

// PingShards checks that the Redis nodes holding shards answer a PING
// within ctx: on a Redis Cluster, each distinct primary that serves the
// slot of a shard's hash tag (as the client's slot map has it), in
// parallel; elsewhere, the one server (or Sentinel's primary). It
// returns nil, or the errors (a *NodeDownError each) of the nodes that
// did not answer, joined. Nodes that serve none of shards are not
// pinged: their failure is not this caller's.
func (s *Store) PingShards(ctx context.Context, shards []int) error {
	cc, ok := s.rdb.(*redis.ClusterClient)
	if !ok {
		if err := s.rdb.Ping(ctx).Err(); err != nil {
			return &NodeDownError{Shards: slices.Clone(shards), Err: err}
		}
		return nil
	}
	byNode := map[string][]int{}
	clients := map[string]*redis.Client{}
	var errs []error
	for _, sh := range shards {
		node, err := cc.MasterForKey(ctx, s.k.Tag(sh))
		if err != nil {
			errs = append(errs, &NodeDownError{Shards: []int{sh}, Err: fmt.Errorf("no primary for the slot: %w", err)})
			continue
		}
		addr := node.Options().Addr
		byNode[addr] = append(byNode[addr], sh)
		clients[addr] = node
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for addr, node := range clients {
		wg.Go(func() {
			if err := node.Ping(ctx).Err(); err != nil {
				mu.Lock()
				errs = append(errs, &NodeDownError{Addr: addr, Shards: byNode[addr], Err: err})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		// The slot map may be stale (a failover promoted a replica): have
		// the client read it again, so the next check asks the new one.
		cc.ReloadState(ctx)
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errors.Join(errs...)
}
