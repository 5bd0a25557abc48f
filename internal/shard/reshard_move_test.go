package shard

import (
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// The reshard's steps (reshard.go): Export out of the old shard into
// its outbox, Import into the new shard, Commit; and what enqueue, lookup,
// cancel and dead-letter replay do with a task on its way. The layout
// record is tested in reshard_test.go.

// TestExportImportCommit moves the tasks of one shard whose shard changes
// (4 -> 12 shards) in every state: the scheduled ones beyond the margin
// (delayed set, far tier, a retry) and the dead ones leave through the
// outbox and arrive as they were, with their counts; the ones in flight
// or due within the margin stay. The owner's steps are fenced, and a
// repeated import stores nothing.
func TestExportImportCommit(t *testing.T) {
	t.Parallel()
	s, rdb := newSizedStore(t, 4)
	ctx := testenv.Ctx(t, 60*time.Second)
	const old = 1
	ids := testenv.MovingIDs(4, 12, old, "mv", 7)
	kinds := map[string]string{}
	for i, k := range []string{kSched, kSoon, kRetry, kDead, kReady, kLeased, kFar} {
		kinds[ids[i]] = k
	}
	seedKinds(t, ctx, s, rdb, old, kinds)
	gone := testenv.MovingIDs(4, 12, old, "gone", 1)[0]
	before := lookupAll(t, ctx, s, ids)
	countsBefore := countsOf(t, ctx, rdb, s.Layout(), old)
	if want := map[string]int64{"s|mail": 2, "s|default": 2, "l|default": 1, "d|default": 1}; !maps.Equal(countsBefore, want) {
		t.Fatalf("seeded counts %v, want %v", countsBefore, want)
	}
	if _, err := s.BeginResize(ctx, 12); err != nil {
		t.Fatal(err)
	}
	l := s.Layout()

	all := append(slices.Clone(ids), gone)
	if _, err := s.Export(ctx, s.Layout(), old, rsEpoch-1, time.Minute, all); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("export with a stale epoch: %v, want ErrStaleEpoch", err)
	}
	if n := rdb.HLen(ctx, l.Tasks(old)).Val(); n != 7 || rdb.Exists(ctx, l.Outbox(old)).Val() != 0 {
		t.Fatalf("the stale export changed the shard: %d tasks left", n)
	}
	res, err := s.Export(ctx, s.Layout(), old, rsEpoch, time.Minute, all)
	if err != nil {
		t.Fatal(err)
	}
	var wantOut []string
	for id, k := range kinds {
		if k == kSched || k == kRetry || k == kDead || k == kFar {
			wantOut = append(wantOut, id)
		}
	}
	slices.Sort(wantOut)
	if got := exportedIDs(res.Tasks); !slices.Equal(got, wantOut) || res.Stayed != 3 || res.Gone != 1 {
		t.Fatalf("export: %v exported, %d stayed, %d gone; want %v, 3 and 1", got, res.Stayed, res.Gone, wantOut)
	}
	box, err := s.Outbox(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(box, func(a, b Exported) int { return strings.Compare(a.ID, b.ID) })
	slices.SortFunc(res.Tasks, func(a, b Exported) int { return strings.Compare(a.ID, b.ID) })
	if !slices.Equal(box, res.Tasks) {
		t.Fatalf("outbox %v, want the exported entries", box)
	}
	wantOld := maps.Clone(countsBefore)
	wantNew := map[int]map[string]int64{}
	for _, id := range wantOut {
		f := countOf(kinds[id])
		wantOld[f]--
		if wantOld[f] == 0 {
			delete(wantOld, f)
		}
		sh := l.ShardOf(id)
		if wantNew[sh] == nil {
			wantNew[sh] = map[string]int64{}
		}
		wantNew[sh][f]++
	}
	if got := countsOf(t, ctx, rdb, l, old); !maps.Equal(got, wantOld) {
		t.Fatalf("old shard's counts after the export: %v, want %v", got, wantOld)
	}
	// On its way, a task is in the outbox and nowhere else.
	for _, id := range wantOut {
		if p := placesOf(t, ctx, rdb, l, old, id); !slices.Equal(p, []string{"outbox"}) && !slices.Equal(p, []string{"far", "outbox"}) {
			t.Fatalf("%s (%s) exported, yet in %v of the old shard", id, kinds[id], p)
		}
	}

	if n := importAll(t, ctx, s, l, res.Tasks); n != len(wantOut) {
		t.Fatalf("imported %d tasks, want %d", n, len(wantOut))
	}
	if _, err := s.Commit(ctx, old, rsEpoch-1, wantOut); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("commit with a stale epoch: %v, want ErrStaleEpoch", err)
	}
	if n := rdb.HLen(ctx, l.Outbox(old)).Val(); n != int64(len(wantOut)) {
		t.Fatalf("the stale commit changed the outbox: %d entries left", n)
	}
	cancelled, err := s.Commit(ctx, old, rsEpoch, wantOut)
	if err != nil || len(cancelled) != 0 {
		t.Fatalf("commit: cancelled %v, %v", cancelled, err)
	}
	if rdb.Exists(ctx, l.Outbox(old)).Val() != 0 {
		t.Fatalf("the outbox is not empty after the commit")
	}
	checkMoved(t, ctx, s, rdb, old, kinds, before)
	if got := countsOf(t, ctx, rdb, l, old); !maps.Equal(got, wantOld) {
		t.Errorf("old shard's counts after the move: %v, want %v", got, wantOld)
	}
	for sh, want := range wantNew {
		if got := countsOf(t, ctx, rdb, l, sh); !maps.Equal(got, want) {
			t.Errorf("new shard %d's counts: %v, want %v", sh, got, want)
		}
	}

	// A repeated import (an owner resuming a batch) stores nothing, also
	// once a task is gone from its new shard.
	if n := importAll(t, ctx, s, l, res.Tasks); n != 0 {
		t.Fatalf("a repeated import stored %d tasks", n)
	}
	sched := ids[0]
	if st, err := s.Cancel(ctx, sched); err != nil || st != "scheduled" {
		t.Fatalf("cancel in the new shard: %q, %v", st, err)
	}
	if n := importAll(t, ctx, s, l, res.Tasks); n != 0 {
		t.Fatalf("an import after the task was cancelled stored %d tasks", n)
	}
	if _, err := s.Lookup(ctx, sched); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the cancelled task came back: %v", err)
	}
}

// TestExportFarTierTask: a far-tier task stays while it is due within the
// margin; exported, its bucket entry stays in the old shard, whose mover
// drops it at promotion, and only the new shard delivers it.
func TestExportFarTierTask(t *testing.T) {
	t.Parallel()
	s, rdb := newSizedStore(t, 2)
	ctx := testenv.Ctx(t, 60*time.Second)
	const old, dst = 0, 2
	if err := s.SetFarTier(ctx, FarTier{Bucket: time.Second, Lead: time.Second}); err != nil {
		t.Fatal(err)
	}
	moving := testenv.MovingIDs(2, 4, old, "fm", 1)[0]
	staying := testenv.IDs("fs", 1, func(id string) bool { return testenv.ShardOf(id, 4) == old })[0] // of shard 0 in both layouts
	if testenv.ShardOf(moving, 4) != dst {
		t.Fatalf("%s goes to shard %d, want %d", moving, testenv.ShardOf(moving, 4), dst)
	}
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	// Its 1 s bucket starts at least 3 s ahead: promoted a second before
	// that, so in the far tier now.
	due := time.UnixMilli(now.Add(4 * time.Second).UnixMilli())
	for _, id := range []string{moving, staying} {
		if r := s.Enqueue(ctx, EnqueueArgs{ID: id, Queue: "default", Due: due, MaxRetries: -1}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	l := s.Layout()
	bucket := due.UnixMilli() - due.UnixMilli()%1000
	if n := rdb.LLen(ctx, l.FarBucket(old, itoa(bucket))).Val(); n != 2 {
		t.Fatalf("bucket holds %d entries, want 2", n)
	}
	if _, err := s.BeginResize(ctx, 4); err != nil {
		t.Fatal(err)
	}
	l = s.Layout()

	// Due within a minute: it runs here.
	res, err := s.Export(ctx, s.Layout(), old, rsEpoch, time.Minute, []string{moving})
	if err != nil || len(res.Tasks) != 0 || res.Stayed != 1 {
		t.Fatalf("export of a far-tier task due within the margin: %+v, %v; want it to stay", res, err)
	}
	res, err = s.Export(ctx, s.Layout(), old, rsEpoch, 500*time.Millisecond, []string{moving})
	if err != nil || len(res.Tasks) != 1 {
		t.Fatalf("export of a far-tier task beyond the margin: %+v, %v", res, err)
	}
	if n := importAll(t, ctx, s, l, res.Tasks); n != 1 {
		t.Fatalf("imported %d, want 1", n)
	}
	if c, err := s.Commit(ctx, old, rsEpoch, []string{moving}); err != nil || len(c) != 0 {
		t.Fatalf("commit: %v, %v", c, err)
	}
	if p := placesOf(t, ctx, rdb, l, old, moving); !slices.Equal(p, []string{"far"}) {
		t.Fatalf("the old shard holds %v of the moved task, want its bucket entry alone", p)
	}

	// Both movers run until each task is ready in its shard.
	promoted := 0
	readyIDs := func(sh int) []string {
		entries := rdb.LRange(ctx, l.Ready(sh, "default"), 0, -1).Val()
		var ids []string
		for _, e := range entries {
			if d, ok := s.Popped(sh, e, time.Now(), 0); ok {
				ids = append(ids, d.Task.ID)
			}
		}
		return ids
	}
	testenv.WaitFor(t, 20*time.Second, "both tasks ready", func() (bool, string) {
		for _, sh := range []int{old, dst} {
			r, err := s.Move(ctx, sh, rsEpoch, 100)
			if err != nil {
				t.Fatal(err)
			}
			if sh == old {
				promoted += r.Promoted
			}
		}
		a, b := readyIDs(old), readyIDs(dst)
		return len(a) > 0 && len(b) > 0, "ready: old " + strings.Join(a, ",") + ", new " + strings.Join(b, ",")
	})
	if promoted != 2 {
		t.Fatalf("the old shard promoted %d entries, want 2 (one of them stale)", promoted)
	}
	if a, b := readyIDs(old), readyIDs(dst); !slices.Equal(a, []string{staying}) || !slices.Equal(b, []string{moving}) {
		t.Fatalf("ready in the old shard: %v, in the new one: %v; want %s and %s", a, b, staying, moving)
	}
	if n := rdb.Exists(ctx, l.Far(old), l.FarBucket(old, itoa(bucket))).Val(); n != 0 {
		t.Fatalf("%d far-tier keys left in the old shard", n)
	}
	if p := placesOf(t, ctx, rdb, l, old, moving); len(p) != 0 {
		t.Fatalf("the old shard still holds %v of the moved task", p)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
