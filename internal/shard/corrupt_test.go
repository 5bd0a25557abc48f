package shard

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// Corrupt data in one shard (issue 24, item 11): each read over every
// shard reports the bad shard and reads the rest; the owner's scripts
// dead-letter what they cannot run, with a reason, instead of failing or
// leaving it stuck.

// A ready list of the wrong type in shard 1 made Depth fail for every
// shard; now shard 0 is read and shard 1 is reported (PartialError).
func TestDepthReportsAnUnreadableShardAndReadsTheRest(t *testing.T) {
	t.Parallel()
	s, rdb := newTestStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	id0 := idsIn(s, 0, 1, "d")[0]
	if r := s.Enqueue(ctx, EnqueueArgs{ID: id0, Queue: "default", Delay: time.Hour, MaxRetries: -1}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if err := rdb.Set(ctx, s.k.Ready(1, "default"), "not a list", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, s.k.Epoch(2), "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	depths, err := s.Depth(ctx, []int{0, 1, 2})
	var pe *PartialError
	if !errors.As(err, &pe) || !errors.Is(err, ErrShardUnreadable) || len(pe.Failed) != 1 || pe.Failed[1] == nil {
		t.Fatalf("Depth: %v, want a partial error naming shard 1", err)
	}
	if !strings.Contains(err.Error(), "shard 1: WRONGTYPE") {
		t.Fatalf("error %q does not say which shard and why", err)
	}
	if len(depths) != 3 || depths[1] != nil || len(depths[0]) == 0 || len(depths[2]) == 0 {
		t.Fatalf("depths: %+v", depths)
	}
	var sched int64
	for _, d := range depths[0] {
		sched += d.Scheduled
	}
	if sched != 1 {
		t.Fatalf("shard 0 counts %d scheduled, want 1: %+v", sched, depths[0])
	}
	epochs, err := s.StoredEpochs(ctx)
	if !errors.As(err, &pe) || len(pe.Failed) != 1 || pe.Failed[2] == nil || len(epochs) != 4 {
		t.Fatalf("StoredEpochs: %v %v, want shard 2 reported", epochs, err)
	}
}

// A stored epoch that is not a number made every fenced script fail with
// a Lua comparison error, so the shard's tasks stayed stuck; the fence
// now overwrites it with the caller's epoch and counts it.
func TestFenceOverwritesAStoredEpochThatIsNotANumber(t *testing.T) {
	t.Parallel()
	s, rdb := newTestStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	id := idsIn(s, 1, 1, "e")[0]
	if r := s.Enqueue(ctx, EnqueueArgs{ID: id, Queue: "default", MaxRetries: -1}); r.Err != nil {
		t.Fatal(r.Err)
	}
	for _, bad := range []string{"garbage", "inf", "-3", "1.5"} {
		if err := rdb.Set(ctx, s.k.Epoch(1), bad, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Move(ctx, 1, 7, 10); err != nil {
			t.Fatalf("move over the stored epoch %q: %v", bad, err)
		}
		if got, _ := rdb.Get(ctx, s.k.Epoch(1)).Result(); got != "7" {
			t.Fatalf("epoch after %q: %q, want the caller's 7", bad, got)
		}
	}
	if n, _ := rdb.HGet(ctx, s.k.Stats(1), "corrupt_epoch").Int(); n != 4 {
		t.Fatalf("corrupt_epoch = %d, want 4", n)
	}
	if st := stateOf(t, s, id); st != "ready" {
		t.Fatalf("task after the move: %s, want ready", st)
	}
	if _, err := s.Move(ctx, 1, 6, 10); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("an older epoch after the overwrite: %v, want ErrStaleEpoch", err)
	}
}

// Task data naming a queue the shard has not registered was moved to a
// ready list nothing reads, and never dead-lettered; the mover now buries
// it with the reason "unknown queue", in the single-task path and in a
// batch.
func TestMoverDeadLettersATaskOfAnUnknownQueue(t *testing.T) {
	t.Parallel()
	s, rdb := newTestStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	ids := idsIn(s, 1, 3, "u")
	now := time.Now().UnixMilli()
	// ids[0] alone (the single-task path), then ids[1] with a valid task
	// of "default", ids[2] (the batch path).
	write := func(id, queue string) {
		t.Helper()
		blob := "1|" + queue + "|0|3|30000|" + strconv.FormatInt(now, 10) + "|" + strconv.FormatInt(now, 10) + "|x"
		if err := rdb.HSet(ctx, s.k.Tasks(1), id, blob).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.ZAdd(ctx, s.k.Delayed(1), redisZ(float64(now-1000), id)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	write(ids[0], "ghost")
	if r, err := s.Move(ctx, 1, 1, 10); err != nil || r.Buried != 1 || r.Moved != 0 {
		t.Fatalf("single: %+v %v", r, err)
	}
	write(ids[1], "ghost")
	if r := s.Enqueue(ctx, EnqueueArgs{ID: ids[2], Queue: "default", MaxRetries: -1}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if r, err := s.Move(ctx, 1, 1, 10); err != nil || r.Buried != 1 || r.Moved != 1 {
		t.Fatalf("batch: %+v %v", r, err)
	}
	for _, id := range ids[:2] {
		info, err := s.Lookup(ctx, id)
		if err != nil || info.State != "dead" || !strings.Contains(info.DeadInfo, `"unknown queue"`) {
			t.Fatalf("%s: %+v %v, want dead with reason unknown queue", id, info, err)
		}
	}
	if n := rdb.Exists(ctx, s.k.Ready(1, "ghost")).Val(); n != 0 {
		t.Fatal("a ready list of the unknown queue was written")
	}
}

// A delayed-set score that is no due time (+inf, 1e300, -inf, below 0):
// lookup and listing say "corrupt due time" (listing used to show due
// 1970); the mover buries a due one and reports no next due time for the
// others (it returned a nonsense one), and the recovery pass buries the
// rest with the reason "corrupt due time".
func TestCorruptDueTimesAreReportedAndDeadLettered(t *testing.T) {
	t.Parallel()
	s, rdb := newTestStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	ids := idsIn(s, 1, 5, "z")
	for _, id := range ids {
		if r := s.Enqueue(ctx, EnqueueArgs{ID: id, Queue: "default", Delay: time.Hour, MaxRetries: -1}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	scores := []string{"+inf", "1e300", "-inf", "-5", "10000000000000"}
	for k, sc := range scores {
		if err := rdb.Do(ctx, "ZADD", s.k.Delayed(1), "XX", sc, ids[k]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for k, id := range ids {
		info, err := s.Lookup(ctx, id)
		if err != nil || info.State != "scheduled" || !info.CorruptDue || !info.At.IsZero() {
			t.Fatalf("lookup of %s (score %s): %+v %v", id, scores[k], info, err)
		}
	}
	es, _, _, err := s.PageSet(ctx, 1, SetDelayed, Cursor{}, 100, Filter{})
	if err != nil || len(es) != len(ids) {
		t.Fatalf("page: %+v %v", es, err)
	}
	for _, e := range es {
		if !e.BadScore || e.Score != 0 {
			t.Fatalf("listed %+v: want BadScore", e)
		}
	}
	r, err := s.Move(ctx, 1, 1, 10)
	if err != nil || r.Moved != 0 || r.Buried != 2 || r.NextDue != -1 {
		t.Fatalf("move: %+v %v, want the two due ones buried and no next due time", r, err)
	}
	rr, err := s.Recover(ctx, 1, 1, RecoverArgs{Limit: 10})
	if err != nil || rr.Buried != 3 { // the mover buried the two below 0
		t.Fatalf("recover: %+v %v, want 3 buried", rr, err)
	}
	for _, id := range ids {
		info, err := s.Lookup(ctx, id)
		if err != nil || info.State != "dead" || !strings.Contains(info.DeadInfo, `"corrupt due time"`) {
			t.Fatalf("%s after recovery: %+v %v", id, info, err)
		}
	}
	if c, _ := rdb.HGetAll(ctx, s.k.Counts(1)).Result(); c["s|default"] != "0" || c["d|default"] != "5" {
		t.Fatalf("counts %v: want 0 scheduled and 5 dead", c)
	}
}

// idsIn returns n ids of shard sh in s's layout: prefix0, prefix1, ...
// skipping those of other shards.
func idsIn(s *Store, sh, n int, prefix string) []string {
	var ids []string
	for i := 0; len(ids) < n; i++ {
		if id := prefix + strconv.Itoa(i); s.Layout().ShardOf(id) == sh {
			ids = append(ids, id)
		}
	}
	return ids
}

func redisZ(score float64, member string) redis.Z { return redis.Z{Score: score, Member: member} }
