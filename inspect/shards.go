package inspect

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/keyslot"
)

// Shards returns every shard with its counts, the epoch its scripts last
// saw in Redis, its hash slot and, on a Redis Cluster, the primary that
// serves it; and its owner and epoch when Config.Owners was given
// (otherwise Owner is "" and Epoch 0). The shards are those of the
// layout record: while the shard count changes, 0..Existing-1 (those being
// left and the new ones), afterwards the new count's. A shard whose data
// cannot be read has a Problem, and the call returns a *PartialError
// (ErrPartial) with the whole table.
func (i *Inspector) Shards(ctx context.Context) ([]Shard, error) {
	l, err := i.layout(ctx)
	if err != nil {
		return nil, err
	}
	depths, derr := i.store.Depth(ctx, span(l))
	if derr = partialOf(derr); derr != nil && !errors.Is(derr, ErrPartial) {
		return nil, derr
	}
	stored, eerr := i.store.StoredEpochs(ctx)
	if eerr = partialOf(eerr); eerr != nil && !errors.Is(eerr, ErrPartial) {
		return nil, eerr
	}
	partial := joinPartial(derr, eerr)
	bad := problems(partial)
	out := make([]Shard, len(depths))
	for sh, ds := range depths {
		out[sh] = Shard{Shard: sh, Slot: keyslot.Of(l.Tag(sh)), Problem: bad[sh]}
		if sh < len(stored) {
			out[sh].StoredEpoch = stored[sh]
		}
		if cc, ok := i.rdb.(*redis.ClusterClient); ok {
			if n, err := cc.MasterForKey(ctx, l.Tag(sh)); err == nil {
				out[sh].Node = n.Options().Addr
			}
		}
		for _, d := range ds {
			out[sh].Counts.add(countsOf(d))
		}
	}
	if i.owners == nil {
		return out, partial
	}
	owners, err := i.owners.Owners(ctx)
	if err != nil {
		return out, fmt.Errorf("read the shard owners from etcd: %w", err)
	}
	for sh, o := range owners {
		if sh >= 0 && sh < len(out) {
			out[sh].Owner, out[sh].Epoch = o.Replica, o.Epoch
		}
	}
	return out, partial
}
