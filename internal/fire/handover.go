package fire

import (
	"context"

	"github.com/hourglass-sched/hourglass/internal/owner"
	"github.com/hourglass-sched/hourglass/internal/shard"
)

// HandOff hands the schedules leaving shard s in l's change of the shard
// count over to their new homes (shard.Store.HandOverSchedules, which
// says how exactly once holds across the move). The reshard
// (internal/reshard) calls it for each shard before the shard can be
// done. Fenced by s.Epoch.
func (f *Firer) HandOff(ctx context.Context, s owner.Shard, l shard.Layout) error {
	f.mu.Lock()
	all := f.all
	f.mu.Unlock()
	names := make([]string, len(all))
	for i, c := range all {
		names[i] = c.Name
	}
	n, err := f.store.HandOverSchedules(ctx, l, s.ID, s.Epoch, names)
	if n > 0 {
		f.log.Info("periodic schedules handed over to their new home shards", "shard", s.ID, "schedules", n)
	}
	return err
}
