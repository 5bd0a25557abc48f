package shard

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestFireRecordsEachOccurrenceOnce: fire.lua enqueues an occurrence's
// task and records the occurrence in one call; firing it again, or an
// earlier one, changes nothing, also after its task is gone (completed);
// the overlap and pause modes record a skip without a task; a stale
// epoch is refused; a refused enqueue still consumes the occurrence.
func TestFireRecordsEachOccurrenceOnce(t *testing.T) {
	t.Parallel()
	s, rdb := newTestStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	l := s.Layout()
	const name = "nightly"
	home := l.HomeShard(name)
	base := time.UnixMilli(1_900_000_000_000)
	occ := func(i int) time.Time { return base.Add(time.Duration(i) * time.Second) }
	fire := func(i int, epoch int64, mutate func(*FireArgs)) FireResult {
		t.Helper()
		id := l.OccurrenceID(name, occ(i))
		if l.ShardOf(id) != home || !strings.HasPrefix(id, name+"@") {
			t.Fatalf("occurrence id %q is in shard %d, home %d", id, l.ShardOf(id), home)
		}
		a := FireArgs{Schedule: name, Occurrence: occ(i), Epoch: epoch,
			Task: EnqueueArgs{ID: id, Queue: "default", Due: occ(i), MaxRetries: -1, Payload: []byte("p")}}
		if mutate != nil {
			mutate(&a)
		}
		r, err := s.Fire(ctx, home, a)
		if err != nil {
			t.Fatalf("fire %d: %v", i, err)
		}
		return r
	}
	if r := fire(1, 3, nil); r.Outcome != Fired || !r.Enqueue.Due.Equal(occ(1)) {
		t.Fatalf("first firing: %+v", r)
	}
	id1 := l.OccurrenceID(name, occ(1))
	if st := stateOf(t, s, id1); st != "scheduled" {
		t.Fatalf("the occurrence's task is %s", st)
	}
	if r := fire(1, 3, nil); r.Outcome != AlreadyFired || !r.Last.Equal(occ(1)) {
		t.Fatalf("the same occurrence again: %+v", r)
	}
	if r := fire(0, 3, nil); r.Outcome != AlreadyFired {
		t.Fatalf("an earlier occurrence: %+v", r)
	}
	// The task completes (acked: its data is deleted); the occurrence
	// still cannot fire again.
	if _, err := s.Cancel(ctx, id1); err != nil {
		t.Fatal(err)
	}
	if r := fire(1, 3, nil); r.Outcome != AlreadyFired {
		t.Fatalf("the occurrence again after its task is gone: %+v", r)
	}
	// Overlap: occurrence 2 fires (nothing stored of 1), 3 is skipped
	// while 2's task is stored, and so is 4: a skipped occurrence has no
	// task, the one waited for is still 2's.
	overlap := func(a *FireArgs) { a.Overlap = true }
	if r := fire(2, 3, overlap); r.Outcome != Fired {
		t.Fatalf("overlap skip with the previous task gone: %+v", r)
	}
	id2 := l.OccurrenceID(name, occ(2))
	for _, i := range []int{3, 4} {
		if r := fire(i, 3, overlap); r.Outcome != SkippedOverlap {
			t.Fatalf("overlap skip of %d with 2's task stored: %+v", i, r)
		}
		if _, err := s.Lookup(ctx, l.OccurrenceID(name, occ(i))); !errors.Is(err, ErrNotFound) {
			t.Fatalf("a skipped occurrence has a task: %v", err)
		}
	}
	if r := fire(5, 3, func(a *FireArgs) { a.Paused = true }); r.Outcome != SkippedPaused {
		t.Fatalf("paused: %+v", r)
	}
	st, err := s.PeriodicState(ctx, home)
	if err != nil || !st[name].Last.Equal(occ(5)) || st[name].LastTask != id2 || !st[name].Fired.Equal(occ(2)) {
		t.Fatalf("state after skips: %+v %v; want last 5, last task and last fired 2's", st, err)
	}
	if _, err := s.Fire(ctx, home, FireArgs{Schedule: name, Occurrence: occ(6), Epoch: 2,
		Task: EnqueueArgs{ID: l.OccurrenceID(name, occ(6)), Queue: "default", Due: occ(6), MaxRetries: -1}}); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("a stale owner fired: %v", err)
	}
	if r := fire(7, 3, func(a *FireArgs) { a.Task.Queue = "nope" }); r.Outcome != Refused || !errors.Is(r.Enqueue.Err, ErrUnknownQueue) {
		t.Fatalf("unknown queue: %+v", r)
	}
	if r := fire(7, 3, nil); r.Outcome != AlreadyFired {
		t.Fatalf("a refused occurrence fired again: %+v", r)
	}
	last, err := s.LastRecorded(ctx, home)
	if err != nil || !last[name].Equal(occ(7)) {
		t.Fatalf("last fired: %v %v", last, err)
	}
	if n, err := rdb.HLen(ctx, l.Periodic(home)).Result(); err != nil || n != 3 {
		t.Fatalf("periodic state has %d fields (%v), want the last occurrence, the last task's and the last fired", n, err)
	}
	if st, err := s.PeriodicState(ctx, home); err != nil || !st[name].Fired.Equal(occ(2)) {
		t.Fatalf("a refused occurrence counts as fired: %+v %v", st, err)
	}
	if _, err := s.Fire(ctx, (home+1)%l.Shards(), FireArgs{Schedule: name, Task: EnqueueArgs{ID: id1}}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("fired in another shard: %v", err)
	}
}

func stateOf(t *testing.T, s *Store, id string) string {
	t.Helper()
	info, err := s.Lookup(testenv.Ctx(t, 10*time.Second), id)
	if err != nil {
		t.Fatal(err)
	}
	return info.State
}

// TestOverlapSkipFollowsThePreviousTaskMovedByAChange: the overlap policy
// holds across a change of the shard count. The previous occurrence's id
// was placed by the old count; when the change moves its task (scheduled
// at least a second ahead: a retry in backoff, a jittered due time), the
// next occurrence is still skipped while that task is stored. fire.lua
// once looked in the schedule's home shard only (HEXISTS on KEYS[2]) and
// fired it.
func TestOverlapSkipFollowsThePreviousTaskMovedByAChange(t *testing.T) {
	t.Parallel()
	s, _ := newSizedStore(t, 4)
	ctx := testenv.Ctx(t, 30*time.Second)
	name := testenv.IDs("ov", 1, func(id string) bool { return testenv.ShardOf(id, 8) < 4 })[0]
	l4 := s.Layout()
	h := l4.HomeShard(name)
	occ1 := time.Now().Truncate(time.Second)
	for l4.ShardOf(l4.OccurrenceID(name, occ1)) == testenv.ShardOf(l4.OccurrenceID(name, occ1), 8) {
		occ1 = occ1.Add(time.Second)
	}
	id1 := l4.OccurrenceID(name, occ1)
	fire := func(occ time.Time) FireResult {
		t.Helper()
		l := s.Layout()
		r, err := s.Fire(ctx, h, FireArgs{Schedule: name, Occurrence: occ, Epoch: rsEpoch, Overlap: true,
			Task: EnqueueArgs{ID: l.OccurrenceID(name, occ), Queue: "default", Due: occ.Add(time.Hour), MaxRetries: -1}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := fire(occ1); r.Outcome != Fired {
		t.Fatalf("first occurrence: %+v", r)
	}
	l, err := s.BeginResize(ctx, 8)
	if err != nil {
		t.Fatal(err)
	}
	importAll(t, ctx, s, l, exportAll(t, ctx, s, h, id1))
	if _, err := s.Commit(ctx, h, rsEpoch, []string{id1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lookup(ctx, id1); err != nil {
		t.Fatalf("previous task: %v", err)
	}
	if r := fire(occ1.Add(time.Minute)); r.Outcome != SkippedOverlap {
		t.Fatalf("next occurrence %v while the previous task %s is still stored (moved to shard %d): overlap skip not applied", r.Outcome, id1, l.ShardOf(id1))
	}
}

// TestHistoryBoundsInFireLua: fire.lua trims and expires a schedule's
// history with the bounds HistoryLen and HistoryTTL state (the script
// has them as literals, so that each fire sends no more arguments).
func TestHistoryBoundsInFireLua(t *testing.T) {
	b, err := luaFS.ReadFile("lua/fire.lua")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		fmt.Sprintf(`redis.call("LTRIM", KEYS[9], 0, %d)`, HistoryLen-1),
		fmt.Sprintf(`redis.call("PEXPIRE", KEYS[9], %d)`, HistoryTTL.Milliseconds()),
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("fire.lua has no %s", want)
		}
	}
}
