package shard

import (
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestTaskOnItsWayDuringResize: while the shard count changes, a task
// whose shard changes is one task wherever it is (its old shard, the
// outbox, its new shard): an enqueue of its id is a duplicate and stores
// nothing, lookup finds it as it was, cancel removes it (and the
// reshard then drops the copy it imported meanwhile), and a dead letter
// not moved yet can be replayed.
func TestTaskOnItsWayDuringResize(t *testing.T) {
	t.Parallel()
	s, rdb := newSizedStore(t, 4)
	ctx := testenv.Ctx(t, 60*time.Second)
	const old, nw = 1, 5 // 4 -> 8 shards: shard 1's tasks that move go to 5
	ids := testenv.MovingIDs(4, 8, old, "ch", 7)
	a, b, c, d, e, f, g := ids[0], ids[1], ids[2], ids[3], ids[4], ids[5], ids[6]
	kinds := map[string]string{a: kSched, b: kSched, c: kDead, d: kSched, e: kSched, f: kDead, g: kDead}
	seedKinds(t, ctx, s, rdb, old, kinds)
	before := lookupAll(t, ctx, s, ids)
	stale := NewStore(rdb, s.Layout()) // a producer still on 4 shards
	if _, err := s.BeginResize(ctx, 8); err != nil {
		t.Fatal(err)
	}
	l := s.Layout()
	for _, id := range ids {
		if l.ShardOf(id) != nw {
			t.Fatalf("%s goes to shard %d, want %d", id, l.ShardOf(id), nw)
		}
	}
	enqueueDup := func(st *Store, id string) {
		t.Helper()
		r := st.Enqueue(ctx, EnqueueArgs{ID: id, Queue: "default", Delay: time.Minute, MaxRetries: -1})
		if !errors.Is(r.Err, ErrDuplicate) {
			t.Fatalf("enqueue of %s, live in its old shard: %+v, want ErrDuplicate", id, r)
		}
		if p := placesOf(t, ctx, rdb, l, nw, id); len(p) != 0 {
			t.Fatalf("the duplicate enqueue of %s stored %v in the new shard", id, p)
		}
	}
	lookupSame := func(id, where string) {
		t.Helper()
		info, err := s.Lookup(ctx, id)
		if err != nil {
			t.Fatalf("lookup of %s %s: %v", id, where, err)
		}
		if diff := infoDiff(before[id], info); diff != "" {
			t.Fatalf("lookup of %s %s: %s", id, where, diff)
		}
	}
	notFound := func(id, where string) {
		t.Helper()
		if info, err := s.Lookup(ctx, id); !errors.Is(err, ErrNotFound) {
			t.Fatalf("lookup of %s %s: %+v, %v; want ErrNotFound", id, where, info, err)
		}
	}

	// In its old shard, not exported yet.
	enqueueDup(s, a)
	enqueueDup(stale, a) // redirected first, then a duplicate
	wantLayout(t, "the stale producer", stale.Layout(), 1, 8, 4)
	lookupSame(a, "in its old shard")
	lookupSame(c, "in its old shard")

	// In the outbox.
	res, err := s.Export(ctx, s.Layout(), old, rsEpoch, time.Minute, []string{b, c, d, e, f})
	if err != nil || len(res.Tasks) != 5 {
		t.Fatalf("export: %+v, %v", res, err)
	}
	entries := map[string]Exported{}
	for _, x := range res.Tasks {
		entries[x.ID] = x
	}
	for _, id := range []string{b, c} {
		enqueueDup(s, id)
		lookupSame(id, "in the outbox")
	}
	// Cancelled on its way: the outbox entry goes.
	for id, want := range map[string]string{e: "scheduled", f: "dead"} {
		if st, err := s.Cancel(ctx, id); err != nil || st != want {
			t.Fatalf("cancel of %s in the outbox: %q, %v; want %s", id, st, err, want)
		}
		if p := placesOf(t, ctx, rdb, l, old, id); len(p) != 0 {
			t.Fatalf("cancelled %s is still in %v of the old shard", id, p)
		}
		notFound(id, "cancelled in the outbox")
		if _, err := s.Cancel(ctx, id); !errors.Is(err, ErrNotFound) {
			t.Fatalf("second cancel of %s: %v", id, err)
		}
	}

	// The owner goes on with the batch it exported: the cancelled tasks
	// are imported too, then found cancelled by the commit and removed.
	if n := importAll(t, ctx, s, l, res.Tasks); n != 5 {
		t.Fatalf("imported %d, want 5", n)
	}
	lookupSame(d, "in its new shard, before the commit")
	cancelled, err := s.Commit(ctx, old, rsEpoch, []string{b, c, d, e, f})
	slices.Sort(cancelled)
	if want := []string{e, f}; err != nil || !slices.Equal(cancelled, want) {
		t.Fatalf("commit: cancelled %v, %v; want %v", cancelled, err, want)
	}
	if err := s.Unimport(ctx, l, nw, []Exported{entries[e], entries[f]}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{e, f} {
		if p := placesOf(t, ctx, rdb, l, nw, id); len(p) != 0 {
			t.Fatalf("unimported %s is still in %v of the new shard", id, p)
		}
		notFound(id, "after the unimport")
	}
	for _, id := range []string{b, c, d} {
		lookupSame(id, "in its new shard")
		if r := s.Enqueue(ctx, EnqueueArgs{ID: id, Queue: "default", MaxRetries: -1}); !errors.Is(r.Err, ErrDuplicate) {
			t.Fatalf("enqueue of %s, moved: %+v, want ErrDuplicate", id, r)
		}
	}
	if got, want := countsOf(t, ctx, rdb, l, nw), map[string]int64{"s|mail": 2, "d|default": 1}; !maps.Equal(got, want) {
		t.Fatalf("new shard's counts %v, want %v", got, want)
	}

	// A dead letter still in its old shard is replayed there.
	at := time.UnixMilli(time.Now().Add(2 * time.Hour).UnixMilli())
	if err := s.DeadOne(ctx, Replay, g, at); err != nil {
		t.Fatalf("replay of %s in its old shard: %v", g, err)
	}
	info, err := s.Lookup(ctx, g)
	if err != nil || info.State != "scheduled" || !info.At.Equal(at) || info.Task.Attempts != 0 || info.DeadInfo != "" || info.LastError != "" {
		t.Fatalf("replayed %s: %+v, %v", g, info, err)
	}
	if p := placesOf(t, ctx, rdb, l, old, g); !slices.Equal(p, []string{"data", "delayed"}) {
		t.Fatalf("replayed %s is in %v of the old shard", g, p)
	}
	if err := s.DeadOne(ctx, Replay, a, at); !errors.Is(err, ErrNotFound) {
		t.Fatalf("replay of a task that is not dead: %v", err)
	}
	if got, want := countsOf(t, ctx, rdb, l, old), map[string]int64{"s|mail": 1, "s|default": 1}; !maps.Equal(got, want) {
		t.Fatalf("old shard's counts %v, want %v", got, want)
	}

	// An id live nowhere goes to its new shard.
	fresh := testenv.MovingIDs(4, 8, old, "fresh", 1)[0]
	if r := s.Enqueue(ctx, EnqueueArgs{ID: fresh, Queue: "default", Delay: time.Hour, MaxRetries: -1}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if p := placesOf(t, ctx, rdb, l, nw, fresh); !slices.Equal(p, []string{"data", "delayed"}) {
		t.Fatalf("a new task is in %v of its new shard", p)
	}
}

// TestEnqueueAfterACancelOnTheWaySurvivesTheUnimport: a task cancelled in
// its old home's outbox (the entry goes), then enqueued again by its
// producer before the owner commits the batch: the enqueue is not told
// "duplicate" by the copy the owner imported meanwhile, which the commit
// finds cancelled and the unimport deletes. It once was, and the
// producer's second task was never stored: nothing ran.
func TestEnqueueAfterACancelOnTheWaySurvivesTheUnimport(t *testing.T) {
	t.Parallel()
	s, rdb := newSizedStore(t, 4)
	ctx := testenv.Ctx(t, 30*time.Second)
	const old, nw = 1, 5
	id := testenv.MovingIDs(4, 8, old, "ry", 1)[0]
	seedKinds(t, ctx, s, rdb, old, map[string]string{id: kSched})
	l, err := s.BeginResize(ctx, 8)
	if err != nil {
		t.Fatal(err)
	}
	exported := exportAll(t, ctx, s, old, id)
	if st, err := s.Cancel(ctx, id); err != nil || st != "scheduled" {
		t.Fatalf("cancel: %q %v", st, err)
	}
	importAll(t, ctx, s, l, exported) // the owner goes on with its batch
	// The user enqueues the id again, after its cancel succeeded.
	res := s.Enqueue(ctx, EnqueueArgs{ID: id, Queue: "default", Delay: time.Hour, MaxRetries: -1, Payload: []byte("second")})
	cancelled, err := s.Commit(ctx, old, rsEpoch, []string{id})
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]Exported{}
	for _, e := range exported {
		byID[e.ID] = e
	}
	var undo []Exported
	for _, c := range cancelled {
		undo = append(undo, byID[c])
	}
	if err := s.Unimport(ctx, l, nw, undo); err != nil {
		t.Fatal(err)
	}
	if _, lerr := s.Lookup(ctx, id); errors.Is(res.Err, ErrDuplicate) && errors.Is(lerr, ErrNotFound) {
		t.Fatalf("the enqueue after the cancel was told %v, and then the task was deleted: nothing will run", res.Err)
	}
}

// TestReshardOnCluster: the reshard's steps on a Redis Cluster, from a
// shard to one whose slot is on another node: each step is a script on
// one shard, so none spans two nodes.
func TestReshardOnCluster(t *testing.T) {
	t.Parallel()
	rc := testenv.StartRedisCluster(t, 3, 0)
	cc := rc.Client(t)
	ctx := testenv.Ctx(t, 2*time.Minute)
	s := sizedStoreOn(t, cc, 8)
	l := s.Layout()
	old := -1
	for sh := range 8 { // 8 -> 16: shard sh's tasks that move go to sh+8
		if rc.NodeForSlot(testenv.KeySlot(l.Tag(sh))) != rc.NodeForSlot(testenv.KeySlot(l.Tag(sh+8))) {
			old = sh
			break
		}
	}
	if old < 0 {
		t.Fatal("every shard's slot is on the node of its new shard's slot")
	}
	ids := testenv.MovingIDs(8, 16, old, "cl", 7)
	kinds := map[string]string{}
	for i, k := range []string{kSched, kSoon, kRetry, kDead, kReady, kLeased, kFar} {
		kinds[ids[i]] = k
	}
	seedKinds(t, ctx, s, cc, old, kinds)
	before := lookupAll(t, ctx, s, ids)
	if _, err := s.BeginResize(ctx, 16); err != nil {
		t.Fatal(err)
	}
	l = s.Layout()
	wantMarkers(t, ctx, cc, l, 16, "1|16|8")

	var scanned []string
	for cursor := uint64(0); ; {
		batch, next, err := s.ScanIDs(ctx, old, cursor, 100)
		if err != nil {
			t.Fatal(err)
		}
		scanned = append(scanned, batch...)
		if cursor = next; cursor == 0 {
			break
		}
	}
	slices.Sort(scanned)
	if want := slices.Sorted(slices.Values(ids)); !slices.Equal(slices.Compact(scanned), want) {
		t.Fatalf("scanned %v, want %v", scanned, want)
	}
	res, err := s.Export(ctx, s.Layout(), old, rsEpoch, time.Minute, scanned)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tasks) != 4 || res.Stayed != 3 {
		t.Fatalf("export: %d exported, %d stayed; want 4 and 3", len(res.Tasks), res.Stayed)
	}
	if n := importAll(t, ctx, s, l, res.Tasks); n != 4 {
		t.Fatalf("imported %d, want 4", n)
	}
	if c, err := s.Commit(ctx, old, rsEpoch, exportedIDs(res.Tasks)); err != nil || len(c) != 0 {
		t.Fatalf("commit: %v, %v", c, err)
	}
	checkMoved(t, ctx, s, cc, old, kinds, before)
}
