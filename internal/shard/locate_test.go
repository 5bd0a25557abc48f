package shard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestHomesOrder: an id the change does not move has one home; one it
// moves is read in its old home, its new home, the old home's outbox,
// then its new home again, and written in the old home with its outbox, then the new one.
func TestHomesOrder(t *testing.T) {
	t.Parallel()
	stable, err := NewLayout("loc", 4)
	if err != nil {
		t.Fatal(err)
	}
	changing, err := stable.withChange(1, 8, 4)
	if err != nil {
		t.Fatal(err)
	}
	moving := testenv.MovingIDs(4, 8, 1, "h", 1)[0]
	staying := testenv.IDs("s", 1, func(id string) bool { return testenv.ShardOf(id, 4) == testenv.ShardOf(id, 8) })[0]
	nw := testenv.ShardOf(moving, 8)
	for _, c := range []struct {
		l             Layout
		id            string
		order         []int
		reads, writes string
	}{
		{stable, moving, []int{1}, "[{1 false}]", "[{1 false}]"},
		{changing, moving, []int{1, nw}, fmt.Sprintf("[{1 false} {%d false} {1 true} {%d false}]", nw, nw), fmt.Sprintf("[{1 true} {%d false}]", nw)},
		{changing, staying, []int{testenv.ShardOf(staying, 8)}, fmt.Sprintf("[{%d false}]", testenv.ShardOf(staying, 8)), fmt.Sprintf("[{%d false}]", testenv.ShardOf(staying, 8))},
	} {
		h := c.l.Homes(c.id)
		if got := h.Order(); fmt.Sprint(got) != fmt.Sprint(c.order) || h.Moving() != (len(c.order) == 2) {
			t.Errorf("%s under %d from %d: order %v moving %v, want %v", c.id, c.l.Shards(), c.l.From(), got, h.Moving(), c.order)
		}
		if r, w := fmt.Sprint(h.Reads()), fmt.Sprint(h.Writes()); r != c.reads || w != c.writes {
			t.Errorf("%s under %d from %d: reads %s writes %s, want %s and %s", c.id, c.l.Shards(), c.l.From(), r, w, c.reads, c.writes)
		}
	}
	if k := stable.OutboxKeys(Place{Shard: 2, Outbox: true}); len(k) != 2 || k[0] != stable.Outbox(2) || k[1] != stable.Cancelled(2) {
		t.Errorf("outbox keys %v", k)
	}
	if k := stable.OutboxKeys(Place{Shard: 2}); k != nil {
		t.Errorf("outbox keys of a place without an outbox: %v", k)
	}
}

// A stage of a change of the shard count from 4 to 8 for a task of shard
// 1 that moves to shard 5, as the reshard takes it (internal/reshard).
type moveStage int

const (
	stageBefore    moveStage = iota // no change yet
	stageSetUp                      // the change runs; the task is in its old home
	stageExported                   // in its old home's outbox
	stageImported                   // in the outbox and in its new home
	stageCommitted                  // in its new home only
	stageEnded                      // the change ended
)

var stageNames = []string{"before", "set up", "exported", "imported", "committed", "ended"}

// locateFixture is one task of kind taken to a stage, with stores that
// look for it: one that followed every step, one on the layout before the
// change (a process that has not heard of it), one on the layout of the
// running change (a process that has not heard of its end).
type locateFixture struct {
	s, stale, changing *Store
	rdb                *redis.Client
	id                 string
	before             Info
}

// newLocateFixture seeds a task of kind (kSched or kDead) in shard 1 of
// 4, in a namespace of its own on rdb, and takes it to stage.
func newLocateFixture(t *testing.T, ctx context.Context, rdb *redis.Client, ns string, kind string, stage moveStage) locateFixture {
	t.Helper()
	l, err := NewLayout(ns, 4)
	if err != nil {
		t.Fatal(err)
	}
	s := NewStore(rdb, l)
	if err := s.RegisterQueues(ctx, map[string]QueuePolicy{
		"default": {MaxRetries: 3, Timeout: 30 * time.Second, MaxPayload: 1024},
		"mail":    {MaxRetries: 7, Timeout: 5 * time.Second, MaxPayload: 1024},
	}); err != nil {
		t.Fatal(err)
	}
	const old = 1
	id := testenv.MovingIDs(4, 8, old, "loc", 1)[0]
	seedKinds(t, ctx, s, rdb, old, map[string]string{id: kind})
	f := locateFixture{s: s, stale: NewStore(rdb, l), rdb: rdb, id: id}
	f.before, err = s.Lookup(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if stage == stageBefore {
		f.changing = NewStore(rdb, l)
		return f
	}
	nl, err := s.BeginResize(ctx, 8)
	if err != nil {
		t.Fatal(err)
	}
	f.changing = NewStore(rdb, nl)
	var exported []Exported
	if stage >= stageExported {
		exported = exportAll(t, ctx, s, old, id)
	}
	if stage >= stageImported {
		importAll(t, ctx, s, nl, exported)
	}
	if stage >= stageCommitted {
		if c, err := s.Commit(ctx, old, rsEpoch, []string{id}); err != nil || len(c) != 0 {
			t.Fatalf("commit: %v, %v", c, err)
		}
	}
	if stage >= stageEnded {
		for sh := range nl.Existing() {
			if _, err := s.ShardDone(ctx, nl, sh); err != nil {
				t.Fatal(err)
			}
		}
		if s.Layout().Resharding() {
			t.Fatalf("the change did not end: %+v", s.Layout())
		}
	}
	return f
}

// TestLocatorFindsAnIdInEveryStageOfAChange: an operation by id written
// against the locator (find, every) is correct during a change of the
// shard count by construction. Exists, the smallest such operation, and
// lookup, cancel and dead-letter replay find the task in every stage of
// its move, from a process that followed the change and from ones whose
// layout is behind (they read the record again on a miss).
func TestLocatorFindsAnIdInEveryStageOfAChange(t *testing.T) {
	t.Parallel()
	rdb := testenv.StartRedis(t).Client(t)
	type op struct {
		name string
		kind string
		run  func(t *testing.T, ctx context.Context, f locateFixture, caller *Store, stage moveStage)
	}
	ops := []op{
		{"exists", kSched, func(t *testing.T, ctx context.Context, f locateFixture, caller *Store, _ moveStage) {
			if ok, err := caller.Exists(ctx, f.id); !ok || err != nil {
				t.Fatalf("Exists = %v, %v; want true", ok, err)
			}
			if ok, err := caller.Exists(ctx, f.id+"-nosuch"); ok || err != nil {
				t.Fatalf("Exists of an unknown id = %v, %v", ok, err)
			}
		}},
		{"lookup", kSched, func(t *testing.T, ctx context.Context, f locateFixture, caller *Store, _ moveStage) {
			info, err := caller.Lookup(ctx, f.id)
			if err != nil {
				t.Fatal(err)
			}
			if d := infoDiff(f.before, info); d != "" {
				t.Fatalf("lookup: %s", d)
			}
		}},
		{"cancel", kSched, func(t *testing.T, ctx context.Context, f locateFixture, caller *Store, _ moveStage) {
			if st, err := caller.Cancel(ctx, f.id); err != nil || st != "scheduled" {
				t.Fatalf("Cancel = %q, %v", st, err)
			}
			if ok, err := f.s.Exists(ctx, f.id); ok || err != nil {
				t.Fatalf("after cancel, Exists = %v, %v", ok, err)
			}
		}},
		{"replay", kDead, func(t *testing.T, ctx context.Context, f locateFixture, caller *Store, stage moveStage) {
			err := caller.DeadOne(ctx, Replay, f.id, time.Time{})
			if stage == stageExported {
				// Between export and import a dead letter cannot be
				// replayed: the caller is told to try again, not that it
				// is not dead.
				if !errors.Is(err, ErrInTransit) || !errors.Is(err, ErrTryAgain) {
					t.Fatalf("replay on its way: %v, want ErrInTransit", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("replay: %v", err)
			}
			if info, err := f.s.Lookup(ctx, f.id); err != nil || info.State != "scheduled" {
				t.Fatalf("after replay: %+v, %v", info, err)
			}
		}},
	}
	var n atomic.Int64
	for _, o := range ops {
		for stage := stageBefore; stage <= stageEnded; stage++ {
			for _, who := range []string{"follower", "stale", "changing"} {
				if (who == "changing" && stage == stageBefore) || (who == "stale" && stage == stageBefore) {
					continue // the same as the follower
				}
				t.Run(fmt.Sprintf("%s/%s/%s", o.name, stageNames[stage], who), func(t *testing.T) {
					t.Parallel()
					ctx := testenv.Ctx(t, 30*time.Second)
					f := newLocateFixture(t, ctx, rdb, fmt.Sprint("loc", n.Add(1)), o.kind, stage)
					caller := map[string]*Store{"follower": f.s, "stale": f.stale, "changing": f.changing}[who]
					o.run(t, ctx, f, caller, stage)
				})
			}
		}
	}
}

// movedOp is an operation by id, and whether it removes the task.
type movedOp struct {
	run     func(ctx context.Context, s *Store, id string) error
	removes bool
}

// TestLocatorFindsATaskMovedBetweenTwoVisits: the reshard may move a task
// to its new home at any moment. Moved right after the first command an
// operation sends, whatever it is, the task is still found, and a cancel
// leaves no copy of it: the old home is visited first, the new one after.
// (If the operation removed the task with that first command, there is
// nothing left to move.)
//
// Cancel once visited the new home first: a batch exported, imported and
// committed between its two reads made it answer ErrNotFound while the
// task lived on in its new home, and ran.
func TestLocatorFindsATaskMovedBetweenTwoVisits(t *testing.T) {
	t.Parallel()
	rdb := testenv.StartRedis(t).Client(t)
	ops := map[string]movedOp{
		"exists": {run: func(ctx context.Context, s *Store, id string) error {
			ok, err := s.Exists(ctx, id)
			if err == nil && !ok {
				err = ErrNotFound
			}
			return err
		}},
		"lookup": {run: func(ctx context.Context, s *Store, id string) error { _, err := s.Lookup(ctx, id); return err }},
		"cancel": {run: func(ctx context.Context, s *Store, id string) error { _, err := s.Cancel(ctx, id); return err }, removes: true},
	}
	forEachOnAFixture(t, rdb, "mv", ops, func(t *testing.T, ctx context.Context, f locateFixture, name string, op movedOp) {
		// After the first command the operation sends that Redis runs
		// (not a new connection's handshake, not an EVALSHA refused
		// for a script not loaded yet).
		h := &testenv.AfterCommand{Match: func([]any) bool { return true }, Fn: func() {
			l := f.s.Layout()
			r, err := f.s.Export(ctx, l, 1, rsEpoch, time.Second, []string{f.id})
			if err != nil || len(r.Tasks) != 1 && !op.removes {
				t.Errorf("export: %+v, %v", r, err)
				return
			}
			if len(r.Tasks) == 0 {
				return // removed by the operation already
			}
			importAll(t, ctx, f.s, l, r.Tasks)
			if c, err := f.s.Commit(ctx, 1, rsEpoch, []string{f.id}); err != nil || len(c) != 0 {
				t.Errorf("commit: %v, %v", c, err)
			}
		}}
		caller := NewStore(testenv.HookedClient(t, f.rdb, h), f.changing.Layout())
		if err := op.run(ctx, caller, f.id); err != nil {
			t.Fatalf("%s of a task moved after the first command: %v", name, err)
		}
		if ok, err := f.s.Exists(ctx, f.id); err != nil || ok == op.removes {
			t.Fatalf("after the %s, Exists = %v, %v", name, ok, err)
		}
		if !f.s.Layout().Resharding() {
			t.Fatal("the change ended")
		}
	})
}

// TestLocatorFindsATaskCommittedBetweenItsNewHomeAndItsOutbox: a read
// visits the old home, the new home, then the outbox. A task already in
// the outbox when the read visited the old home, and imported and
// committed after it visited the new home, is in neither place the read
// has left: the read visits the new home once more after the outbox.
// Before, it answered ErrNotFound (Reschedule of a far-tier task in
// TestRescheduleUnderRaces, on a starved machine).
func TestLocatorFindsATaskCommittedBetweenItsNewHomeAndItsOutbox(t *testing.T) {
	t.Parallel()
	rdb := testenv.StartRedis(t).Client(t)
	ops := map[string]func(ctx context.Context, s *Store, id string) error{
		"exists": func(ctx context.Context, s *Store, id string) error {
			ok, err := s.Exists(ctx, id)
			if err == nil && !ok {
				err = ErrNotFound
			}
			return err
		},
		"lookup": func(ctx context.Context, s *Store, id string) error { _, err := s.Lookup(ctx, id); return err },
		"change": func(ctx context.Context, s *Store, id string) error {
			_, err := s.Change(ctx, id, Change{SetDue: true, Due: time.Now().Add(time.Hour)})
			return err
		},
	}
	forEachOnAFixture(t, rdb, "nb", ops, func(t *testing.T, ctx context.Context, f locateFixture, name string, op func(ctx context.Context, s *Store, id string) error) {
		exported := exportAll(t, ctx, f.s, 1, f.id)
		l := f.changing.Layout()
		newTag := fmt.Sprintf("{%s:%d}", l.Namespace(), l.Homes(f.id).New)
		h := &testenv.AfterCommand{Match: func(args []any) bool { return strings.Contains(fmt.Sprint(args), newTag) }, Fn: func() {
			importAll(t, ctx, f.s, l, exported)
			if c, err := f.s.Commit(ctx, 1, rsEpoch, []string{f.id}); err != nil || len(c) != 0 {
				t.Errorf("commit: %v, %v", c, err)
			}
		}}
		caller := NewStore(testenv.HookedClient(t, f.rdb, h), l)
		if err := op(ctx, caller, f.id); err != nil {
			t.Fatalf("%s of a task committed after the read of its new home: %v", name, err)
		}
	})
}

// forEachOnAFixture runs body as a parallel subtest for each of ops, on a
// fixture of its own: a task of kSched in shard 1 of 4, a change to 8
// shards set up, in a namespace named prefix and a number.
func forEachOnAFixture[Op any](t *testing.T, rdb *redis.Client, prefix string, ops map[string]Op, body func(t *testing.T, ctx context.Context, f locateFixture, name string, op Op)) {
	var n atomic.Int64
	for name, op := range ops {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := testenv.Ctx(t, 30*time.Second)
			body(t, ctx, newLocateFixture(t, ctx, rdb, fmt.Sprint(prefix, n.Add(1)), kSched, stageSetUp), name, op)
		})
	}
}
