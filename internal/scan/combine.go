package scan

import (
	"context"
	"fmt"

	"github.com/hourglass-sched/hourglass/internal/groupcommit"
	"github.com/hourglass-sched/hourglass/internal/shard"
)

// combiner sends the mover calls of a scheduler's shards that overlap in
// time as one round trip (internal/groupcommit): a call made while
// another is in flight waits for it, and then every call that waited
// meanwhile goes together, as one shard.Store.MoveMany. A call made while
// none is in flight goes at once, alone, as it would without the
// combiner; under load, when calls start to queue behind each other,
// they share their round trip and Redis's per-call cost, which is what a
// shard seeing one task per call pays most for. Each shard keeps its own
// fence, LIMIT and reply.
type combiner struct {
	*groupcommit.Combiner[shard.MoveRequest, shard.MoveOutcome]
}

func newCombiner(store *shard.Store, met *Metrics) *combiner {
	return &combiner{groupcommit.New(func(ctx context.Context, reqs []shard.MoveRequest) []shard.MoveOutcome {
		met.observeShared(len(reqs))
		if len(reqs) == 1 {
			r := reqs[0]
			res, err := store.MoveShard(ctx, r)
			return []shard.MoveOutcome{{Result: res, Err: err}}
		}
		for i := range reqs {
			reqs[i].Limit = shareLimit(reqs[i].Limit, len(reqs))
		}
		return store.MoveMany(ctx, reqs)
	})}
}

// move moves req's due tasks, alone or with other shards' calls, and
// returns its outcome.
func (c *combiner) move(ctx context.Context, req shard.MoveRequest) (shard.MoveResult, error) {
	out, ok := c.Do(ctx, req)
	if !ok {
		return shard.MoveResult{}, fmt.Errorf("scan: move shard %d: %w", req.Shard, context.Cause(ctx))
	}
	return out.Result, out.Err
}

// minShare is the least LIMIT a shard keeps in a combined call.
const minShare = 64

// shareLimit is a shard's LIMIT in a call combined with n-1 others: its
// own divided among them, down to minShare (never above its own). A
// combined call so moves about one shard's full batch in all, and holds
// Redis (a single thread) about as long as one call of its own would,
// not n times as long. A shard that had more due than its share finds
// its next due time already reached, and its mover calls again at once.
func shareLimit(limit, n int) int {
	return min(limit, max(limit/n, minShare))
}
