package shard

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// Changing the shard count online (layout.go, reshard.go): the layout
// record and the shards' markers, the redirect of producers on an older
// generation, and the scan that lists a shard's tasks. The reshard's
// steps are tested in reshard_move_test.go.

// TestLayoutRecordLifecycle follows a change of the shard count from 16
// to 32 through the layout record and the markers: begun (record
// resharding, every shard marked, the queues registered in the new
// shards), refused while it runs, ended by the last shard done and only
// by it, then stable; a resize to the current count changes nothing.
func TestLayoutRecordLifecycle(t *testing.T) {
	t.Parallel()
	s, rdb := newSizedStore(t, 16)
	ctx := testenv.Ctx(t, 30*time.Second)
	l := s.Layout()
	if err := s.SetFarTier(ctx, FarTier{Bucket: time.Minute, Lead: time.Second}); err != nil {
		t.Fatal(err)
	}
	// Before any change: no record, the store's own layout, markers of
	// generation 0 written by the registration.
	r, err := s.ReadLayout(ctx)
	if err != nil || r.State != "" {
		t.Fatalf("record before any change: %+v, %v", r, err)
	}
	wantLayout(t, "layout without a record", r.Layout, 0, 16, 0)
	wantMarkers(t, ctx, rdb, l, 16, "0|16|0")
	for _, n := range []int{0, MaxShards + 1} {
		if _, err := s.BeginResize(ctx, n); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("resize to %d: %v, want ErrInvalidArgument", n, err)
		}
	}

	next, err := s.BeginResize(ctx, 32)
	if err != nil {
		t.Fatal(err)
	}
	wantLayout(t, "BeginResize's layout", next, 1, 32, 16)
	wantLayout(t, "the store's layout", s.Layout(), 1, 32, 16)
	r, err = s.ReadLayout(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != LayoutResharding || r.Gen != 1 || r.Shards != 32 || r.From != 16 || r.Started.IsZero() || len(r.Done) != 0 {
		t.Fatalf("record after BeginResize: %+v", r)
	}
	wantLayout(t, "the record's layout", r.Layout, 1, 32, 16)
	wantMarkers(t, ctx, rdb, l, 32, "1|32|16")
	reg0, err := rdb.HGetAll(ctx, l.Queues(0)).Result()
	if err != nil || len(queueFields(reg0)) != 2 || reg0["|far"] == "" {
		t.Fatalf("queues of shard 0: %v, %v", reg0, err)
	}
	maps.DeleteFunc(reg0, func(f, _ string) bool { return namespaceField(f) }) // shard 0's own
	for sh := 16; sh < 32; sh++ {
		if reg := rdb.HGetAll(ctx, l.Queues(sh)).Val(); !maps.Equal(reg, reg0) {
			t.Fatalf("queues of new shard %d: %v, want shard 0's %v", sh, reg, reg0)
		}
	}

	// While it runs, no other change starts, not even to the same count.
	for _, n := range []int{32, 24, 16} {
		if _, err := s.BeginResize(ctx, n); !errors.Is(err, ErrResizeRunning) {
			t.Fatalf("second resize to %d: %v, want ErrResizeRunning", n, err)
		}
	}
	if err := s.AddMoved(ctx, next, 5); err != nil {
		t.Fatal(err)
	}
	if err := s.AddMoved(ctx, next, 2); err != nil {
		t.Fatal(err)
	}

	// Shards done in a scrambled order; only the last one ends the change.
	order := make([]int, 32)
	for i := range order {
		order[i] = (i*7 + 3) % 32
	}
	for i, sh := range order {
		ended, err := s.ShardDone(ctx, next, sh)
		if err != nil {
			t.Fatal(err)
		}
		if last := i == len(order)-1; ended != last {
			t.Fatalf("ShardDone of shard %d (%d of 32) ended the change: %v", sh, i+1, ended)
		}
		if i == 0 { // a repeat changes nothing
			if ended, err := s.ShardDone(ctx, next, sh); err != nil || ended {
				t.Fatalf("repeated ShardDone: %v, %v", ended, err)
			}
		}
		if i == len(order)-2 {
			if r, err := s.ReadLayout(ctx); err != nil || r.State != LayoutResharding || len(r.Done) != 31 || r.Moved != 7 {
				t.Fatalf("record with one shard left: %+v, %v", r, err)
			}
		}
	}
	if ended, err := s.ShardDone(ctx, next, order[len(order)-1]); err != nil || ended {
		t.Fatalf("ShardDone after the end: %v, %v; want not ended again", ended, err)
	}
	r, err = s.ReadLayout(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != LayoutStable || r.Gen != 1 || r.Shards != 32 || r.From != 0 || r.Finished.IsZero() || r.Finished.Before(r.Started) || len(r.Done) != 32 || r.Moved != 7 {
		t.Fatalf("record after the last shard: %+v", r)
	}
	wantLayout(t, "the record's layout after the end", r.Layout, 1, 32, 0)
	wantLayout(t, "the store's layout after the end", s.Layout(), 1, 32, 0)
	wantMarkers(t, ctx, rdb, l, 32, "1|32|0")
	if err := s.AddMoved(ctx, next, 1); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.ReadLayout(ctx); r.Moved != 7 {
		t.Fatalf("AddMoved after the end counted: %d, want 7", r.Moved)
	}

	// A resize to the current count is a no-op.
	same, err := s.BeginResize(ctx, 32)
	if err != nil {
		t.Fatal(err)
	}
	wantLayout(t, "resize to the same count", same, 1, 32, 0)
	r2, err := s.ReadLayout(ctx)
	if err != nil || r2.State != LayoutStable || r2.Gen != 1 || !r2.Started.Equal(r.Started) || !r2.Finished.Equal(r.Finished) {
		t.Fatalf("record after a resize to the same count: %+v, %v", r2, err)
	}
	wantMarkers(t, ctx, rdb, l, 32, "1|32|0")
	wantLayout(t, "the store's layout after a no-op", s.Layout(), 1, 32, 0)

	// A store made with the old count learns the record.
	stale := NewStore(rdb, l)
	got, err := stale.RefreshLayout(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantLayout(t, "a stale store after RefreshLayout", got, 1, 32, 0)
}

// TestLayoutPreparingLeftByCrash: a change whose BeginResize stopped after
// the compare-and-set (record "preparing", markers partly written) keeps
// producers on the layout it leaves; BeginResize with the same count
// finishes it, another count is refused.
func TestLayoutPreparingLeftByCrash(t *testing.T) {
	t.Parallel()
	s, rdb := newSizedStore(t, 16)
	ctx := testenv.Ctx(t, 30*time.Second)
	l := s.Layout()
	// What BeginResize(32) does before it crashes: the record, and the
	// markers of a few shards.
	v, err := layoutScript.Run(ctx, rdb, []string{l.Record()}, "begin", 0, 32, 16).Int64Slice()
	if err != nil || v[0] != 1 || v[1] != 1 {
		t.Fatalf("begin: %v, %v", v, err)
	}
	for sh := range 3 {
		rdb.Set(ctx, l.Marker(sh), "1|32|16", 0)
	}
	r, err := s.ReadLayout(ctx)
	if err != nil || r.State != LayoutPreparing || r.Gen != 1 || r.Shards != 32 || r.From != 16 {
		t.Fatalf("record left preparing: %+v, %v", r, err)
	}
	wantLayout(t, "the layout of a preparing record", r.Layout, 0, 16, 0)

	if _, err := s.BeginResize(ctx, 24); !errors.Is(err, ErrResizeRunning) {
		t.Fatalf("resize to another count: %v, want ErrResizeRunning", err)
	}
	if r, _ := s.ReadLayout(ctx); r.State != LayoutPreparing || r.Shards != 32 {
		t.Fatalf("the refused resize changed the record: %+v", r)
	}
	next, err := s.BeginResize(ctx, 32)
	if err != nil {
		t.Fatal(err)
	}
	wantLayout(t, "the finished change", next, 1, 32, 16)
	r, err = s.ReadLayout(ctx)
	if err != nil || r.State != LayoutResharding || r.Gen != 1 || r.Shards != 32 || r.From != 16 {
		t.Fatalf("record after finishing: %+v, %v", r, err)
	}
	wantMarkers(t, ctx, rdb, l, 32, "1|32|16")
	for sh := 16; sh < 32; sh++ {
		if n := len(queueFields(rdb.HGetAll(ctx, l.Queues(sh)).Val())); n != 2 {
			t.Fatalf("new shard %d has %d queues registered, want 2", sh, n)
		}
	}
}

// TestCrashWhilePreparingLeavesNoAcknowledgedTaskUnowned: a resize that
// dies after writing the shards' markers and before "start" leaves the
// record "preparing". A producer redirected by the markers must not have
// a task acknowledged into a new shard that the schedulers and workers,
// who follow the record (the old count while it prepares), do not run.
// Once they did not: nobody owned, moved or popped such a task until an
// operator noticed and ran the resize again.
func TestCrashWhilePreparingLeavesNoAcknowledgedTaskUnowned(t *testing.T) {
	t.Parallel()
	s, rdb := newSizedStore(t, 4)
	ctx := testenv.Ctx(t, 30*time.Second)
	// BeginResize(8) up to its markers, then the process dies.
	h := &testenv.AfterCommand{Match: testenv.CommandOn("set", s.k.Marker(7)), Fn: func() { panic("operator's process dies") }}
	op := NewStore(testenv.HookedClient(t, rdb, h), *s.base)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("BeginResize never set the marker of shard 7: no crash to test")
			}
		}()
		_, _ = op.BeginResize(ctx, 8)
	}()
	producer := NewStore(rdb, *s.base) // on the old layout
	id := testenv.IDs("p", 1, func(id string) bool { return testenv.ShardOf(id, 8) >= 4 })[0]
	r := producer.Enqueue(ctx, EnqueueArgs{ID: id, Queue: "default", Delay: time.Second, MaxRetries: -1})
	sched := NewStore(rdb, *s.base)
	sl, err := sched.RefreshLayout(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r.Err == nil && testenv.ShardOf(id, 8) >= sl.Existing() {
		t.Fatalf("%s was acknowledged into shard %d, but schedulers/workers run span %d (record preparing): nobody owns, moves or pops it", id, testenv.ShardOf(id, 8), sl.Existing())
	}
}

// TestQueueRegisteredWhilePreparingReachesTheNewShards: a scheduler that
// registers its queues while a resize prepares (after BeginResize copied
// shard 0's registrations into the new shards) registers them in the new
// shards too. Once it registered them in the old shards only: enqueues
// placed in the new shards failed with ErrUnknownQueue for good.
func TestQueueRegisteredWhilePreparingReachesTheNewShards(t *testing.T) {
	t.Parallel()
	s, rdb := newSizedStore(t, 4)
	ctx := testenv.Ctx(t, 30*time.Second)
	h := &testenv.AfterCommand{Match: testenv.CommandOn("hgetall", s.k.Queues(0)), Fn: func() {
		// A scheduler starting now (new version, new queue "audit").
		sched := NewStore(rdb, *s.base)
		if _, err := sched.RefreshLayout(ctx); err != nil {
			t.Error(err)
		}
		if err := sched.RegisterQueues(ctx, map[string]QueuePolicy{"audit": {MaxRetries: 1, Timeout: time.Second, MaxPayload: 64}}); err != nil {
			t.Error(err)
		}
	}}
	op := NewStore(testenv.HookedClient(t, rdb, h), *s.base)
	l, err := op.BeginResize(ctx, 8)
	if err != nil {
		t.Fatal(err)
	}
	s.SetLayout(l)
	var missing []int
	for sh := 0; sh < 8; sh++ {
		if !rdb.HExists(ctx, l.Queues(sh), "audit").Val() {
			missing = append(missing, sh)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("queue audit, registered by a scheduler during the resize, is missing in shards %v for good", missing)
	}
}

// TestFirstResizeTakesTheShardCountFromTheMarkers: with no layout record
// yet, BeginResize takes the count it leaves from the shards' markers
// (written by RegisterQueues, "0|32|0"), not from its caller's
// configuration. It once trusted the caller: an operator whose config
// said 16 on a deployment of 32 started "16 -> 8", and shards 16..31,
// outside the span, lost their owners and were never moved.
func TestFirstResizeTakesTheShardCountFromTheMarkers(t *testing.T) {
	t.Parallel()
	s, rdb := newSizedStore(t, 32)
	ctx := testenv.Ctx(t, 30*time.Second)
	id := testenv.IDs("far-", 1, func(id string) bool { return testenv.ShardOf(id, 32) >= 16 })[0]
	if r := s.Enqueue(ctx, EnqueueArgs{ID: id, Queue: "default", Delay: time.Hour, MaxRetries: -1}); r.Err != nil {
		t.Fatal(r.Err)
	}
	cfg16, _ := NewLayout("rs", 16)
	cli := NewStore(rdb, cfg16) // the operator's CLI, configured with 16
	l, err := cli.BeginResize(ctx, 8)
	if err != nil {
		t.Fatalf("BeginResize: %v", err)
	}
	if sh := testenv.ShardOf(id, 32); sh >= l.Existing() {
		t.Fatalf("the change runs %d -> %d (span %d) but %s lives in shard %d: no owner, no move", l.From(), l.Shards(), l.Existing(), id, sh)
	}
}

// TestEnqueueFollowsLayoutRedirect: a producer whose layout is older than
// a shard's marker is refused by that shard with nothing written; the
// store adopts the newer layout and places the task by it. A producer
// that sends no generation is not checked.
func TestEnqueueFollowsLayoutRedirect(t *testing.T) {
	t.Parallel()
	s, rdb := newSizedStore(t, 16)
	ctx := testenv.Ctx(t, 30*time.Second)
	l := s.Layout()
	stale := NewStore(rdb, l) // made before the change: generation 0, 16 shards
	if _, err := s.BeginResize(ctx, 32); err != nil {
		t.Fatal(err)
	}
	wantLayout(t, "the stale store before its enqueue", stale.Layout(), 0, 16, 0)

	// An id whose shard changes (to one of the new shards), and one whose
	// shard does not: both are refused first by the shard of the old
	// layout.
	var moving, staying string
	for i := 0; moving == "" || staying == ""; i++ {
		id := fmt.Sprintf("redir%d", i)
		switch n := testenv.ShardOf(id, 32); {
		case moving == "" && n >= 16:
			moving = id
		case staying == "" && n < 16:
			staying = id
		}
	}
	due := time.UnixMilli(time.Now().Add(time.Hour).UnixMilli())
	res := stale.EnqueueBatch(ctx, []EnqueueArgs{
		{ID: moving, Queue: "default", Due: due, MaxRetries: -1, Payload: []byte("m")},
		{ID: staying, Queue: "default", Due: due, MaxRetries: -1, Payload: []byte("s")},
	})
	for i, r := range res {
		if r.Err != nil || !r.Due.Equal(due) {
			t.Fatalf("enqueue %d by the stale store: %+v", i, r)
		}
	}
	wantLayout(t, "the stale store after its enqueue", stale.Layout(), 1, 32, 16)
	for _, id := range []string{moving, staying} {
		sh := testenv.ShardOf(id, 32)
		if !rdb.HExists(ctx, l.Tasks(sh), id).Val() {
			t.Fatalf("%s is not in its shard %d of 32", id, sh)
		}
		if sc, err := rdb.ZScore(ctx, l.Delayed(sh), id).Result(); err != nil || int64(sc) != due.UnixMilli() {
			t.Fatalf("%s in the delayed set of shard %d: %v, %v", id, sh, sc, err)
		}
	}
	if old := testenv.ShardOf(moving, 16); rdb.HExists(ctx, l.Tasks(old), moving).Val() {
		t.Fatalf("%s stored in its old shard %d too", moving, old)
	}

	// The script itself, as a producer in another language calls it.
	id := testenv.MovingIDs(16, 32, 3, "raw", 1)[0]
	const sh = 3
	keys := []string{l.Delayed(sh), l.Tasks(sh), l.Queues(sh), l.Far(sh), l.Counts(sh), l.Marker(sh)}
	task := []any{id, "+60000", "default", "", "", "payload"}
	err := rdb.Eval(ctx, EnqueueScriptSource(), keys, append([]any{"@0", l.WakeChannel(sh)}, task...)...).Err()
	if err == nil || !strings.HasPrefix(err.Error(), "LAYOUT 1 32 16") {
		t.Fatalf("enqueue at generation 0: %v, want the error LAYOUT 1 32 16", err)
	}
	if n := rdb.Exists(ctx, l.Tasks(sh), l.Delayed(sh), l.Counts(sh)).Val(); n != 0 {
		t.Fatalf("the refused enqueue wrote %d keys", n)
	}
	if _, err := rdb.Eval(ctx, EnqueueScriptSource(), keys, append([]any{"@x", l.WakeChannel(sh)}, task...)...).Result(); err == nil || !strings.Contains(err.Error(), "invalid layout generation") {
		t.Fatalf("enqueue with a malformed generation: %v", err)
	}
	// The current generation, or none (a producer that predates the
	// markers), is accepted.
	v, err := rdb.Eval(ctx, EnqueueScriptSource(), keys, append([]any{"@1", l.WakeChannel(sh)}, task...)...).Slice()
	if err != nil || v[0] != int64(1) {
		t.Fatalf("enqueue at generation 1: %v, %v", v, err)
	}
	task[0] = id + "-legacy"
	v, err = rdb.Eval(ctx, EnqueueScriptSource(), keys[:5], append([]any{l.WakeChannel(sh)}, task...)...).Slice()
	if err != nil || v[0] != int64(1) {
		t.Fatalf("enqueue without a generation: %v, %v", v, err)
	}
	if n := rdb.HLen(ctx, l.Tasks(sh)).Val(); n != 2 {
		t.Fatalf("shard %d holds %d tasks, want 2", sh, n)
	}
}

// TestScanIDs: the scan returns every task id of a shard, over as many
// cursor steps as the hash needs, and none of another shard.
func TestScanIDs(t *testing.T) {
	t.Parallel()
	s, rdb := newTestStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	l := s.Layout()
	// A hash larger than a listpack may hold is scanned in steps (a
	// listpack is returned whole).
	if err := rdb.ConfigSet(ctx, "hash-max-listpack-entries", "16").Err(); err != nil {
		t.Fatal(err)
	}
	want := shardIDs(l, 2, "scan", 200)
	var as []EnqueueArgs
	for _, id := range append(slices.Clone(want), shardIDs(l, 1, "other", 20)...) {
		as = append(as, EnqueueArgs{ID: id, Queue: "default", Delay: time.Hour, MaxRetries: -1})
	}
	for i, r := range s.EnqueueBatch(ctx, as) {
		if r.Err != nil {
			t.Fatalf("enqueue %d: %v", i, r.Err)
		}
	}
	got := map[string]bool{}
	steps := 0
	for cursor := uint64(0); ; {
		ids, next, err := s.ScanIDs(ctx, 2, cursor, 20)
		if err != nil {
			t.Fatal(err)
		}
		steps++
		for _, id := range ids {
			got[id] = true
		}
		if next == 0 {
			break
		}
		if steps > 1000 {
			t.Fatal("the scan does not end")
		}
		cursor = next
	}
	if steps < 2 {
		t.Fatalf("the scan took %d step, want several", steps)
	}
	if len(got) != len(want) {
		t.Fatalf("the scan found %d ids, want %d", len(got), len(want))
	}
	for _, id := range want {
		if !got[id] {
			t.Fatalf("the scan missed %s", id)
		}
	}
	ids, next, err := s.ScanIDs(ctx, 3, 0, 20)
	if err != nil || len(ids) != 0 || next != 0 {
		t.Fatalf("scan of an empty shard: %v, %d, %v", ids, next, err)
	}
}

// queueFields returns the fields of a queues hash that are queues.
func queueFields(reg map[string]string) []string {
	var out []string
	for f := range reg {
		if ValidQueue(f) {
			out = append(out, f)
		}
	}
	return out
}
