package shard

import (
	"cmp"
	"context"
	"maps"
	"strings"

	"github.com/hourglass-sched/hourglass/internal/errtext"
)

// copyQueues registers the queues of shard 0 in shards from..n-1, with
// the weights, caps and rates of fair queues' keys (written in every
// shard).
func (s *Store) copyQueues(ctx context.Context, from, n int) error {
	if n <= from {
		return nil
	}
	reg, err := s.rdb.HGetAll(ctx, s.k.Queues(0)).Result()
	if err != nil {
		return errtext.Errorf("read the queues to register: %w", err)
	}
	maps.DeleteFunc(reg, func(f, _ string) bool { return namespaceField(f) })
	if len(reg) == 0 {
		return nil
	}
	// The fair queues' keys' weights and caps, per queue.
	keyed := map[string][3]map[string]string{}
	for f := range reg {
		q, ok := strings.CutPrefix(f, "|fair|")
		if !ok {
			continue
		}
		w, werr := s.rdb.HGetAll(ctx, s.k.FairWeights(0, q)).Result()
		c, cerr := s.rdb.HGetAll(ctx, s.k.FairCaps(0, q)).Result()
		r, rerr := s.rdb.HGetAll(ctx, s.k.FairRates(0, q)).Result()
		if err := cmp.Or(werr, cerr, rerr); err != nil {
			return errtext.Errorf("read the keys' weights and limits of queue %q: %w", q, err)
		}
		keyed[q] = [3]map[string]string{w, c, r}
	}
	pipe := s.rdb.Pipeline()
	for sh := from; sh < n; sh++ {
		pipe.HSet(ctx, s.k.Queues(sh), reg)
		for q, wc := range keyed {
			if len(wc[0]) > 0 {
				pipe.HSet(ctx, s.k.FairWeights(sh, q), wc[0])
			}
			if len(wc[1]) > 0 {
				pipe.HSet(ctx, s.k.FairCaps(sh, q), wc[1])
			}
			if len(wc[2]) > 0 {
				pipe.HSet(ctx, s.k.FairRates(sh, q), wc[2])
			}
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return errtext.Errorf("register the queues in the new shards: %w", err)
	}
	return nil
}
