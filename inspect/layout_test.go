package inspect_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
	"github.com/hourglass-sched/hourglass/periodic"
)

// shardIDs returns the shard numbers of a Shards listing.
func shardIDs(t *testing.T, in *inspect.Inspector) []int {
	t.Helper()
	ss, err := in.Shards(testenv.Ctx(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int, len(ss))
	for k, s := range ss {
		out[k] = s.Shard
	}
	return out
}

func upTo(n int) []int {
	out := make([]int, n)
	for k := range out {
		out[k] = k
	}
	return out
}

// TestResizeFollowsTheRecord: Resize 4 -> 8 starts a change (resharding,
// generation 1, the tasks of the old shards pending), a second Resize is
// refused with ErrResizeRunning, and the Inspector (and another one made
// with the old count, as a long-lived dashboard's) covers the 8 shards at
// once: shards, queue depths, listings and lookups see the tasks placed
// by the new count. Marking every shard done (as their owners do) makes
// the record stable, with the 8 shards still listed; then a shrink back
// to 4 lists 8 shards while it runs and 4 after, and a listing's cursor
// left in a removed shard ends the listing.
func TestResizeFollowsTheRecord(t *testing.T) {
	t.Parallel()
	e, in := newInspector(t, 4)
	other, err := inspect.New(e.RDB, inspect.Config{Namespace: "insp", Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Ctx(t, time.Minute)
	before := ids("old-", 200)
	e.Schedule("a", time.Hour, before...)

	st, err := in.Layout(ctx)
	if err != nil || st.State != inspect.LayoutNone || st.Generation != 0 || st.Shards != 4 || st.Span != 4 || st.Changing() {
		t.Fatalf("layout before any change: %+v %v", st, err)
	}
	if got := shardIDs(t, other); !slices.Equal(got, upTo(4)) {
		t.Fatalf("shards before the change: %v", got)
	}

	st, err = in.Resize(ctx, 8)
	if err != nil {
		t.Fatalf("resize 4 -> 8: %v", err)
	}
	if st.State != inspect.LayoutResharding || st.Generation != 1 || st.Shards != 8 || st.From != 4 || st.Span != 8 ||
		len(st.Done) != 0 || st.Moved != 0 || st.Started.IsZero() || !st.Finished.IsZero() {
		t.Fatalf("after resize 4 -> 8: %+v", st)
	}
	var pending int64
	for k, p := range st.Pending {
		if p.Shard != k {
			t.Fatalf("pending shards %+v: want 0..3 in order", st.Pending)
		}
		pending += p.Tasks
	}
	if len(st.Pending) != 4 || pending != int64(len(before)) {
		t.Fatalf("pending %+v: want the 4 old shards holding %d tasks", st.Pending, len(before))
	}
	for _, n := range []int{8, 16} {
		again, err := in.Resize(ctx, n)
		if !errors.Is(err, inspect.ErrResizeRunning) || again.State != inspect.LayoutResharding || again.Generation != 1 {
			t.Fatalf("resize to %d while 4 -> 8 runs: %+v %v", n, again, err)
		}
	}
	if _, err := in.Resize(ctx, 0); !errors.Is(err, inspect.ErrInvalidArgument) {
		t.Fatalf("resize to 0: %v", err)
	}

	// Both Inspectors follow the record: 8 shards, the queues registered
	// in the new ones, tasks placed by the new count found there.
	for name, i := range map[string]*inspect.Inspector{"resizer": in, "other": other} {
		if got := shardIDs(t, i); !slices.Equal(got, upTo(8)) {
			t.Fatalf("%s: shards during the change: %v", name, got)
		}
	}
	if _, err := e.Store.RefreshLayout(ctx); err != nil {
		t.Fatal(err)
	}
	newer := e.IDsIn(6, 20, "new-")
	e.Schedule("a", time.Hour, newer...)
	q, err := other.Queue(ctx, "a")
	if err != nil || len(q.Shards) != 8 || q.Shards[6].Scheduled != 20 || q.Counts.Scheduled != 220 {
		t.Fatalf("queue a during the change: %+v %v", q, err)
	}
	if tk, err := other.Task(ctx, newer[0]); err != nil || tk.Shard != 6 || tk.State != inspect.StateScheduled {
		t.Fatalf("a task of a new shard: %+v %v", tk, err)
	}
	seen, _ := listAll(t, other, inspect.ListOptions{State: inspect.StateScheduled, Limit: 50})
	checkOnce(t, "scheduled during the change", seen, append(slices.Clone(before), newer...))
	if err := other.SetQueue(ctx, "c", inspect.DefaultPolicy()); err != nil {
		t.Fatal(err)
	}
	if q, err := in.Queue(ctx, "c"); err != nil || q.State != inspect.QueueActive || len(q.Shards) != 8 {
		t.Fatalf("a queue set during the change: %+v %v", q, err)
	}

	// The owners record their shards done; the last one ends the change.
	l := e.Store.Layout()
	for _, sh := range []int{4, 5, 6, 7, 0, 1, 2} {
		if ended, err := e.Store.ShardDone(ctx, l, sh); err != nil || ended {
			t.Fatalf("shard %d done: ended %v, %v", sh, ended, err)
		}
	}
	if err := e.Store.AddMoved(ctx, l, 42); err != nil {
		t.Fatal(err)
	}
	st, err = in.Layout(ctx)
	if err != nil || st.State != inspect.LayoutResharding || len(st.Done) != 7 || st.Moved != 42 ||
		len(st.Pending) != 1 || st.Pending[0].Shard != 3 {
		t.Fatalf("7 of 8 shards done: %+v %v", st, err)
	}
	if ended, err := e.Store.ShardDone(ctx, l, 3); err != nil || !ended {
		t.Fatalf("the last shard done: ended %v, %v", ended, err)
	}
	st, err = other.Layout(ctx)
	if err != nil || st.State != inspect.LayoutStable || st.Generation != 1 || st.Shards != 8 || st.From != 0 || st.Span != 8 ||
		st.Changing() || st.Done == nil || len(st.Done) != 0 || st.Moved != 42 || st.Finished.Before(st.Started) || st.Pending != nil {
		t.Fatalf("after the change: %+v %v", st, err)
	}
	for name, i := range map[string]*inspect.Inspector{"resizer": in, "other": other} {
		if got := shardIDs(t, i); !slices.Equal(got, upTo(8)) {
			t.Fatalf("%s: shards after the change: %v", name, got)
		}
		if i.ShardCount() != 8 {
			t.Fatalf("%s: shard count %d after the change", name, i.ShardCount())
		}
	}

	// A shrink lists the 8 shards while it runs, 4 after; a cursor left
	// in shard 4..7 then ends its listing.
	if st, err := other.Resize(ctx, 4); err != nil || st.State != inspect.LayoutResharding || st.From != 8 || st.Span != 8 {
		t.Fatalf("resize 8 -> 4: %+v %v", st, err)
	}
	if got := shardIDs(t, in); !slices.Equal(got, upTo(8)) {
		t.Fatalf("shards during the shrink: %v", got)
	}
	if err := in.Pause(ctx, "nope"); !errors.Is(err, inspect.ErrNotFound) {
		t.Fatalf("pause of an unknown queue during the shrink: %v", err)
	}
	if err := in.Pause(ctx, "c"); err != nil {
		t.Fatalf("pause of a queue during the shrink: %v", err)
	}
	opts := inspect.ListOptions{State: inspect.StateScheduled, Queue: "a", Limit: 5}
	for {
		p, err := in.ListTasks(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		if p.Cursor == "" {
			t.Fatal("the listing ended before reaching shard 6")
		}
		opts.Cursor = p.Cursor
		if len(p.Tasks) > 0 && p.Tasks[len(p.Tasks)-1].Shard == 6 {
			break
		}
	}
	l, err = e.Store.RefreshLayout(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for sh := range 8 {
		if _, err := e.Store.ShardDone(ctx, l, sh); err != nil {
			t.Fatal(err)
		}
	}
	if got := shardIDs(t, in); !slices.Equal(got, upTo(4)) {
		t.Fatalf("shards after the shrink: %v", got)
	}
	if p, err := in.ListTasks(ctx, opts); err != nil || p.Cursor != "" || len(p.Tasks) != 0 {
		t.Fatalf("a cursor in a removed shard: %d tasks, cursor %q, %v", len(p.Tasks), p.Cursor, err)
	}
	// The record still holds the 8 done:<s> fields of the shrink; the
	// status lists no shard that no longer exists.
	if st, err := in.Layout(ctx); err != nil || st.State != inspect.LayoutStable || st.Generation != 2 || st.Shards != 4 || st.Span != 4 ||
		st.Done == nil || len(st.Done) != 0 {
		t.Fatalf("after the shrink: %+v %v", st, err)
	}
}

// TestResizeToTheSameCount: resizing to the current count changes
// nothing (no generation, no record).
func TestResizeToTheSameCount(t *testing.T) {
	t.Parallel()
	e, in := newInspector(t, 4)
	ctx := testenv.Ctx(t, 10*time.Second)
	st, err := in.Resize(ctx, 4)
	if err != nil || st.State != inspect.LayoutNone || st.Generation != 0 || st.Shards != 4 {
		t.Fatalf("resize to the same count: %+v %v", st, err)
	}
	if n, err := e.RDB.Exists(ctx, e.Layout().Record()).Result(); err != nil || n != 0 {
		t.Fatalf("a layout record was written: %d %v", n, err)
	}
}

// TestSchedulesAcrossAChange: while 4 -> 8 runs, a schedule whose home
// moves is shown in its new home with the last occurrence its old home
// recorded (the new home fires from the later of the two), then with the
// new home's once that one fires.
func TestSchedulesAcrossAChange(t *testing.T) {
	t.Parallel()
	e, in := newInspector(t, 4)
	ctx := testenv.Ctx(t, 30*time.Second)
	l4, l8 := e.Layout(), mustLayout(t, "insp", 8)
	name := ""
	for k := 0; name == ""; k++ {
		if n := fmt.Sprintf("tick-%d", k); l4.HomeShard(n) != l8.HomeShard(n) {
			name = n
		}
	}
	def := compile(t, periodic.Schedule{Name: name, Queue: "a", Interval: 10 * time.Second})
	fire := func(occ time.Time) {
		t.Helper()
		l := e.Store.Layout()
		r, err := e.Store.Fire(ctx, l.HomeShard(name), shard.FireArgs{Schedule: name, Occurrence: occ, Epoch: shardtest.Epoch,
			Task: shard.EnqueueArgs{ID: l.OccurrenceID(name, occ), Queue: "a", Due: occ, MaxRetries: -1}})
		if err != nil || r.Outcome != shard.Fired {
			t.Fatalf("fire %s at %v: %+v %v", name, occ, r, err)
		}
	}
	show := func(what string, home int, last time.Time) {
		t.Helper()
		ss, err := in.Schedules(ctx, []*periodic.Compiled{def}, last, 0)
		if err != nil || len(ss) != 1 || ss[0].Shard != home || !ss[0].LastFired.Equal(last) {
			t.Fatalf("%s: %+v %v; want shard %d, last fired %v", what, ss, err, home, last)
		}
	}
	t1 := time.Date(2030, 3, 1, 11, 0, 0, 0, time.UTC)
	fire(t1)
	show("before the change", l4.HomeShard(name), t1)
	if _, err := in.Resize(ctx, 8); err != nil {
		t.Fatal(err)
	}
	show("during the change, recorded in the old home only", l8.HomeShard(name), t1)
	if _, err := e.Store.RefreshLayout(ctx); err != nil {
		t.Fatal(err)
	}
	t2 := t1.Add(10 * time.Second)
	fire(t2) // by the new home's owner
	show("during the change, fired by the new home", l8.HomeShard(name), t2)
}

func mustLayout(t *testing.T, ns string, n int) shard.Layout {
	t.Helper()
	l, err := shard.NewLayout(ns, n)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
