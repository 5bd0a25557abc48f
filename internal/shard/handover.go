package shard

import (
	"context"
	"maps"
)

// Periodic schedules across a change of the shard count
// (docs/resharding.md, "Periodic schedules"). A schedule's home is the
// shard of its name (HomeShard), so it moves when that shard changes.
// Exactly once per occurrence holds across the move:
//
//   - the old home's owner hands each leaving schedule over
//     (HandOverSchedules, run by the reshard before the shard can be
//     done): its last occurrence is marked moved, after which fire.lua
//     refuses it there, and copied to the new home (Adopt);
//   - the new home fires a schedule that arrives only once it is marked
//     moved in its old home (HomeSchedules marks it itself if the old
//     home's owner has not yet), starting from the later of the two
//     homes' last occurrences.
//
// So no occurrence is fired by both homes, whichever of them sees the new
// layout first; one due while the hand-over runs is fired late by the new
// home.

// HandOverSchedules hands those of the schedules names whose home leaves
// shard sh in l's change over to their new homes, and returns them, in
// the order of names. Calling it again is harmless (a schedule handed
// over stays so) and returns the same names. Fenced by epoch
// (ErrStaleEpoch) and by sh's marker (ErrStaleLayout). It does nothing
// while no change runs.
func (s *Store) HandOverSchedules(ctx context.Context, l Layout, sh int, epoch int64, names []string) ([]string, error) {
	if !l.Resharding() {
		return nil, nil
	}
	var leaving []string
	for _, n := range names {
		if h := l.Homes(n); h.Moving() && h.Old == sh {
			leaving = append(leaving, n)
		}
	}
	states, err := s.HandOff(ctx, l, sh, epoch, leaving)
	if err != nil {
		return nil, err
	}
	by := map[int]map[string]ScheduleState{}
	for n, st := range states {
		h := l.HomeShard(n)
		if by[h] == nil {
			by[h] = map[string]ScheduleState{}
		}
		by[h][n] = st
	}
	for h, sts := range by {
		if err := s.Adopt(ctx, h, sts); err != nil {
			return nil, err
		}
	}
	return leaving, nil
}

// HomeSchedules returns what shard sh records of the schedules names
// whose home it is (PeriodicState), once it has taken over those that a
// change of the shard count brings to it (takeOverSchedules). The owner
// of sh reads them so before it fires them.
func (s *Store) HomeSchedules(ctx context.Context, sh int, names []string) (map[string]ScheduleState, error) {
	if err := s.takeOverSchedules(ctx, sh, names); err != nil {
		return nil, err
	}
	return s.PeriodicState(ctx, sh)
}

// takeOverSchedules, while a change of the shard count runs, takes over
// every schedule of names that arrives in its new home sh from another
// shard: one its old home did not hand over yet it hands over itself,
// which needs no fence (the mark is atomic with fire.lua's check in the
// old home); then it adopts the later of the two records. It does
// nothing while no change runs.
func (s *Store) takeOverSchedules(ctx context.Context, sh int, names []string) error {
	l := s.Layout()
	if !l.Resharding() {
		return nil
	}
	from := map[int][]string{}
	for _, n := range names {
		if h := l.Homes(n); h.Moving() && h.New == sh {
			from[h.Old] = append(from[h.Old], n)
		}
	}
	for o, ns := range from {
		old, err := s.PeriodicState(ctx, o)
		if err != nil {
			return err
		}
		sts := map[string]ScheduleState{}
		var pending []string
		for _, n := range ns {
			if st := old[n]; st.Moved {
				sts[n] = st
			} else {
				pending = append(pending, n)
			}
		}
		handed, err := s.HandOff(ctx, l, o, 0, pending)
		if err != nil {
			return err
		}
		maps.Copy(sts, handed)
		if err := s.Adopt(ctx, sh, sts); err != nil {
			return err
		}
	}
	return nil
}

// LastOccurrences returns what is recorded of each schedule of names
// that has a record, wherever a change of the shard count has it: the
// record of its homes with the later last occurrence (the new home fires
// from the later of the two). One read per distinct home.
func (s *Store) LastOccurrences(ctx context.Context, names []string) (map[string]ScheduleState, error) {
	l := s.Layout()
	read := map[int]map[string]ScheduleState{}
	out := make(map[string]ScheduleState, len(names))
	for _, n := range names {
		for _, sh := range l.Homes(n).Order() {
			m, ok := read[sh]
			if !ok {
				var err error
				if m, err = s.PeriodicState(ctx, sh); err != nil {
					return nil, err
				}
				read[sh] = m
			}
			if st, ok := m[n]; ok {
				cur := out[n]
				if !st.Last.Before(cur.Last) {
					cur.Last, cur.LastTask = st.Last, st.LastTask
				}
				if st.Fired.After(cur.Fired) {
					cur.Fired = st.Fired
				}
				out[n] = cur
			}
		}
	}
	return out, nil
}
