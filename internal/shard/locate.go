package shard

import (
	"context"
	"errors"
	"fmt"

	"github.com/hourglass-sched/hourglass/internal/errtext"
)

// Where an id lives (docs/resharding.md, "Where an id lives").
//
// Under a stable layout an id has one home, ShardOf(id). While a change
// of the shard count runs, an id whose shard changes may be in its old
// home (its shard by the count being left), in that home's outbox
// (exported by the reshard, on its way), in the outbox and in its new home
// (imported, not yet committed), or in its new home only — and it only
// ever goes that way. Nothing stores it in the old home after the change
// began (enqueues are redirected by the shards' markers; tasks in flight
// are not exported, they finish where they are). So:
//
//   - a read visits the old home, then the new home, then the old home's
//     outbox, then the new home once more (Homes.Reads): it prefers the
//     imported copy, which is the task from then on (a change made to
//     it, such as a replay, is not in the outbox entry), to the entry
//     that records its way; and it cannot miss an id that exists
//     throughout, whenever it moves: an id in the outbox when the read
//     left the old home, and imported and committed between the read's
//     visits of the new home and the outbox, is found by the last visit
//     (without it, such a read answered "not found" while the task lived
//     on; the last visit costs one call, on a miss only);
//   - a write that must leave no copy behind (cancel) visits the old home
//     with its outbox, then the new home (Homes.Writes): a copy on its way
//     is marked cancelled in the outbox, and the reshard's commit removes
//     what it imported.
//
// A process may also be behind the layout record (it has not heard of a
// change yet, or of its end): an id it does not find may be in a shard of
// a count it does not know. So when no home has the id, the locator
// re-reads the record and, if the layout changed, visits the id's homes
// by the new one.
//
// Every id-addressed operation of this package goes through find (the
// first home that has the id) or every (each home), never through its own
// "try the old shard too". An operation written against them is correct
// during a change by construction; Exists is the smallest example.

// Homes is where an id may live under a layout.
type Homes struct {
	// ID is the id located.
	ID string
	// New is the id's shard by the count tasks are placed by (Shards):
	// where an enqueue stores it.
	New int
	// Old is its shard by the count a running change leaves; New when no
	// change runs or when the change leaves the id's shard as it is.
	Old int
}

// Homes returns where id may live under l.
func (l Layout) Homes(id string) Homes {
	h := Homes{ID: id, New: l.ShardOf(id)}
	h.Old = h.New
	if l.from > 0 {
		h.Old = l.oldShardOf(id)
	}
	return h
}

// Moving reports whether the running change moves the id from Old to New
// (it may be in either, or in Old's outbox on its way).
func (h Homes) Moving() bool { return h.Old != h.New }

// Order returns the shards the id may be in: Old, then New, while the
// change moves it; else New alone.
func (h Homes) Order() []int {
	if h.Moving() {
		return []int{h.Old, h.New}
	}
	return []int{h.New}
}

// Reads returns the places a read visits, in order: the old home, the new
// home, the old home's outbox, then the new home again (see the top of
// locate.go).
func (h Homes) Reads() []Place {
	if !h.Moving() {
		return []Place{{Shard: h.New}}
	}
	return []Place{{Shard: h.Old}, {Shard: h.New}, {Shard: h.Old, Outbox: true}, {Shard: h.New}}
}

// Writes returns the places a write that must leave no copy visits, in
// order: the old home with its outbox, then the new home.
func (h Homes) Writes() []Place {
	if !h.Moving() {
		return []Place{{Shard: h.New}}
	}
	return []Place{{Shard: h.Old, Outbox: true}, {Shard: h.New}}
}

// Place is one place an id may be in, as a script call addresses it.
type Place struct {
	// Shard is the shard to look in.
	Shard int
	// Outbox is set where the id may be on its way out of Shard, in its
	// outbox (or among its cancelled entries): a script that looks there
	// declares those keys (Keys.OutboxKeys). The outbox exists only while
	// a change runs; on a Redis Cluster a declared key that exists
	// nowhere stops a script while its slot migrates, so they are
	// declared only then.
	Outbox bool
}

// OutboxKeys returns the outbox and cancelled-entries keys of p's shard
// to declare to a script that looks there, or none.
func (k Keys) OutboxKeys(p Place) []string {
	if !p.Outbox {
		return nil
	}
	return []string{k.Outbox(p.Shard), k.Cancelled(p.Shard)}
}

// probe looks for the id in one place: it reports whether it found it
// there (it acted on it, for a write). An error ends the visit.
type probe func(ctx context.Context, p Place) (found bool, err error)

// find visits id's places in Homes.Reads order until probe finds it, and
// returns probe's error, if any. When no place has it and the layout
// record says the layout changed since, it visits the places by the new
// layout; then it returns ErrNotFound, naming id. A probe that cannot act
// on an id on its way (in an outbox) returns inTransit's answer.
func (s *Store) find(ctx context.Context, id string, look probe) error {
	_, err := s.visit(ctx, id, look, false)
	return err
}

// every visits each of id's places in Homes.Writes order (a write that
// must leave no copy behind) until probe fails, and reports whether any
// place had the id. When none had it, it re-reads the layout as find
// does; it never returns ErrNotFound itself.
func (s *Store) every(ctx context.Context, id string, act probe) (bool, error) {
	return s.visit(ctx, id, act, true)
}

func (s *Store) visit(ctx context.Context, id string, look probe, all bool) (bool, error) {
	for attempt := 0; ; attempt++ {
		l := s.Layout()
		h := l.Homes(id)
		places := h.Reads()
		if all {
			places = h.Writes()
		}
		any := false
		for _, p := range places {
			found, err := look(ctx, p)
			if err != nil {
				return any || found, err
			}
			if found && !all {
				return true, nil
			}
			any = any || found
		}
		if any {
			return true, nil
		}
		if attempt > 0 || !s.relocate(ctx, l) {
			if all {
				return false, nil
			}
			return false, taskNotFound(id)
		}
	}
}

// inTransit is the probe answer for an outbox place where the operation
// cannot act on the id: ErrInTransit if the id is there (nothing was
// done; try again shortly), else not found.
func (s *Store) inTransit(ctx context.Context, p Place, id string) (bool, error) {
	in, err := s.rdb.HExists(ctx, s.k.Outbox(p.Shard), id).Result()
	switch {
	case err != nil:
		return false, errtext.Errorf("look for %q on its way out of shard %d: %w", id, p.Shard, err)
	case in:
		return true, fmt.Errorf("%w: %q is moving out of shard %d", ErrInTransit, id, p.Shard)
	}
	return false, nil
}

// relocate re-reads the layout record after a miss and reports whether
// the layout changed from l (adopted by the store and its follower).
func (s *Store) relocate(ctx context.Context, l Layout) bool {
	after, err := s.RefreshLayout(ctx)
	return err == nil && after != l
}

// Exists reports whether a task with id is stored, in any state
// (scheduled, ready, running or dead), wherever a change of the shard
// count has it. It is the smallest operation written against the
// locator: one HEXISTS per place visited.
func (s *Store) Exists(ctx context.Context, id string) (bool, error) {
	if !ValidStoredID(id) {
		return false, fmt.Errorf("%w: task id %q", ErrInvalidArgument, id)
	}
	err := s.find(ctx, id, func(ctx context.Context, p Place) (bool, error) {
		return s.existsIn(ctx, p, id)
	})
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// existsIn reports whether id is stored in one place: the shard's tasks,
// or its outbox for an outbox place.
func (s *Store) existsIn(ctx context.Context, p Place, id string) (bool, error) {
	key := s.k.Tasks(p.Shard)
	if p.Outbox {
		key = s.k.Outbox(p.Shard)
	}
	ok, err := s.rdb.HExists(ctx, key, id).Result()
	if err != nil {
		return false, errtext.Errorf("exists %q in shard %d: %w", id, p.Shard, err)
	}
	return ok, nil
}
