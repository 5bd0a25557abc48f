package fire

import (
	"context"
	"maps"

	"github.com/hourglass-sched/hourglass/internal/owner"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/periodic"
)

// Changing the shard count moves a schedule's home when the shard of its
// name changes (docs/resharding.md, "Periodic schedules"). Exactly once
// per occurrence holds across the move:
//
//   - the old home's owner hands each leaving schedule over (HandOff,
//     run by the migration before its shard can be done): its last
//     occurrence is marked moved, after which fire.lua refuses it there,
//     and copied to the new home (shard.Store.Adopt);
//   - the new home fires a schedule that arrives only once it is marked
//     moved in its old home (takeOver marks it itself if the old home's
//     owner has not yet), starting from the later of the two homes' last
//     occurrences.
//
// So no occurrence is fired by both homes, whichever of them sees the new
// layout first; one due while the hand-over runs is fired late by the
// new home.

// HandOff hands the schedules leaving shard s in l's change over to their
// new homes. The migration (internal/reshard) calls it for each shard
// before the shard can be done. Fenced by s.Epoch.
func (f *Firer) HandOff(ctx context.Context, s owner.Shard, l shard.Layout) error {
	if !l.Migrating() {
		return nil
	}
	f.mu.Lock()
	all := f.all
	f.mu.Unlock()
	var names []string
	for _, c := range all {
		if l.OldShardOf(c.Name) == s.ID && l.HomeShard(c.Name) != s.ID {
			names = append(names, c.Name)
		}
	}
	states, err := f.store.HandOff(ctx, l, s.ID, s.Epoch, names)
	if err != nil {
		return err
	}
	by := map[int]map[string]shard.ScheduleState{}
	for n, st := range states {
		h := l.HomeShard(n)
		if by[h] == nil {
			by[h] = map[string]shard.ScheduleState{}
		}
		by[h][n] = st
	}
	for h, sts := range by {
		if err := f.store.Adopt(ctx, h, sts); err != nil {
			return err
		}
	}
	if len(names) > 0 {
		f.log.Info("periodic schedules handed over to their new home shards", "shard", s.ID, "schedules", len(names))
	}
	return nil
}

// takeOver, while a change runs, takes every schedule of mine that
// arrives from another home over: one its old home did not hand over yet
// (HandOff) it hands over itself, which needs no fence (the mark is
// atomic with fire.lua's check in the old home); then it adopts the
// later of the two records.
func (f *Firer) takeOver(ctx context.Context, s owner.Shard, mine []*periodic.Compiled) error {
	l := f.store.Layout()
	if !l.Migrating() {
		return nil
	}
	from := map[int][]*periodic.Compiled{}
	for _, c := range mine {
		if o := l.OldShardOf(c.Name); o != s.ID {
			from[o] = append(from[o], c)
		}
	}
	for o, cs := range from {
		old, err := f.store.PeriodicState(ctx, o)
		if err != nil {
			return err
		}
		sts := map[string]shard.ScheduleState{}
		var pending []string
		for _, c := range cs {
			if st := old[c.Name]; st.Moved {
				sts[c.Name] = st
			} else {
				pending = append(pending, c.Name)
			}
		}
		handed, err := f.store.HandOff(ctx, l, o, 0, pending)
		if err != nil {
			return err
		}
		maps.Copy(sts, handed)
		if err := f.store.Adopt(ctx, s.ID, sts); err != nil {
			return err
		}
	}
	return nil
}
