package shard

import (
	"context"
	"errors"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/errtext"
)

// WaitingLists returns the lists of fair queue's tasks in shard sh that
// wait for their key's turn and are not empty: each level's list
// (Keys.FairList, Keys.FairLevelList) of the keys on the queue's ring and
// of its keys held at their cap or out of tokens. A change of the shard
// count reads them (ListWindow) and moves what waits too long or nobody
// takes (a paused queue, a paused key, a key held at its cap) with
// ExportWaiting, as it moves a ready list's. Nil for a queue that is not
// fair in the shard (no ring, no held keys). Read-only.
func (s *Store) WaitingLists(ctx context.Context, sh int, queue string) ([]string, error) {
	ring, err := s.rdb.LRange(ctx, s.k.FairRing(sh, queue), 0, -1).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, errtext.Errorf("read the ring of queue %q in shard %d: %w", queue, sh, err)
	}
	held, err := s.rdb.SMembers(ctx, s.k.FairHeld(sh, queue)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, errtext.Errorf("read the held keys of queue %q in shard %d: %w", queue, sh, err)
	}
	keys := slices.Compact(slices.Sorted(slices.Values(slices.Concat(ring, held))))
	if len(keys) == 0 {
		return nil, nil
	}
	var lists []string
	for _, k := range keys {
		for _, p := range []Priority{PriorityHigh, PriorityNormal, PriorityLow} {
			lists = append(lists, s.k.FairLevelList(sh, queue, k, p))
		}
	}
	lens := make([]*redis.IntCmd, len(lists))
	pipe := s.rdb.Pipeline()
	for i, l := range lists {
		lens[i] = pipe.LLen(ctx, l)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, errtext.Errorf("read the keys' lists of queue %q in shard %d: %w", queue, sh, err)
	}
	out := lists[:0]
	for i, l := range lists {
		if lens[i].Val() > 0 {
			out = append(out, l)
		}
	}
	return out, nil
}
