package shard

import (
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestFarTier follows tasks through the far tier: stored in a bucket list
// (not the delayed set), reported as scheduled, deduplicated and
// cancellable there, promoted into the delayed set at their exact due
// times once their bucket's lead time comes (LIMIT-bounded), stale and
// hand-written entries dropped or buried, and delivered like any task.
func TestFarTier(t *testing.T) {
	t.Parallel()
	s, rdb := newTestStore(t)
	ctx := testenv.Ctx(t, 60*time.Second)
	l := s.Layout()
	const sh = 2
	if err := s.SetFarTier(ctx, FarTier{Bucket: time.Second, Lead: time.Second}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetFarTier(ctx, FarTier{Bucket: 500 * time.Millisecond, Lead: time.Second}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("bucket below 1s: %v", err)
	}
	now := func() time.Time { tm, _ := rdb.Time(ctx).Result(); return tm }
	// Due 3.5 s ahead: its 1 s bucket starts at least 2.5 s ahead, so its
	// promotion (bucket start - 1 s) is still in the future: far tier.
	due := now().Add(3500 * time.Millisecond).Truncate(time.Millisecond)
	far := shardIDs(l, sh, "far", 5)
	for _, id := range far {
		if r := s.Enqueue(ctx, EnqueueArgs{ID: id, Queue: "default", Due: due, Payload: []byte("p-" + id)}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	near := shardIDs(l, sh, "near", 1)[0]
	if r := s.Enqueue(ctx, EnqueueArgs{ID: near, Queue: "default", Delay: 200 * time.Millisecond}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if _, err := rdb.ZScore(ctx, l.Delayed(sh), far[0]).Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("far task in the delayed set: %v", err)
	}
	if _, err := rdb.ZScore(ctx, l.Delayed(sh), near).Result(); err != nil {
		t.Fatalf("near task not in the delayed set: %v", err)
	}
	bucket := due.UnixMilli() - due.UnixMilli()%1000
	if n := rdb.LLen(ctx, l.FarBucket(sh, strconv.FormatInt(bucket, 10))).Val(); n != 5 {
		t.Fatalf("bucket %d holds %d entries, want 5", bucket, n)
	}
	if sc, err := rdb.ZScore(ctx, l.Delayed(sh), FarSentinel).Result(); err != nil || int64(sc) != bucket-1000 {
		t.Fatalf("sentinel score %v (%v), want %d", sc, err, bucket-1000)
	}
	info, err := s.Lookup(ctx, far[0])
	if err != nil || info.State != "scheduled" || !info.At.Equal(due) {
		t.Fatalf("lookup of a far task: %+v %v, want scheduled at %v", info, err, due)
	}
	r := s.Enqueue(ctx, EnqueueArgs{ID: far[0], Queue: "default", Delay: time.Hour})
	if !errors.Is(r.Err, ErrDuplicate) || r.State != "scheduled" || !r.Due.Equal(due) {
		t.Fatalf("duplicate of a far task: %+v", r)
	}
	// Cancelled: its entry goes stale. Re-enqueued in the same bucket: a
	// second entry, and only the new task is promoted, once.
	if st, err := s.Cancel(ctx, far[1]); err != nil || st != "scheduled" {
		t.Fatalf("cancel of a far task: %q %v", st, err)
	}
	if st, err := s.Cancel(ctx, far[2]); err != nil || st != "scheduled" {
		t.Fatalf("cancel of a far task: %q %v", st, err)
	}
	due2 := due.Add(100 * time.Millisecond)
	if r := s.Enqueue(ctx, EnqueueArgs{ID: far[2], Queue: "default", Due: due2}); r.Err != nil {
		t.Fatal(r.Err)
	}
	// Written by hand into the bucket: an entry for a task that does not
	// exist, and one whose data is garbage.
	garbage := shardIDs(l, sh, "garbage", 1)[0]
	rdb.HSet(ctx, l.Tasks(sh), garbage, "not a task")
	rdb.RPush(ctx, l.FarBucket(sh, strconv.FormatInt(bucket, 10)), "ghost|1", garbage+"|1")

	// Promotion with LIMIT 2: the owner calls until nothing is promoted
	// any more; every call promotes at most 2.
	var promoted int
	testenv.WaitFor(t, 10*time.Second, "the bucket promoted", func() (bool, string) {
		res, err := s.Move(ctx, sh, 1, 2)
		if err != nil {
			t.Fatal(err)
		}
		if res.Promoted > 2 {
			t.Fatalf("promoted %d with LIMIT 2", res.Promoted)
		}
		promoted += res.Promoted
		_, err = rdb.ZScore(ctx, l.Delayed(sh), FarSentinel).Result()
		return promoted > 0 && errors.Is(err, redis.Nil), fmt.Sprintf("promoted %d, %+v", promoted, res)
	})
	if promoted != 8 { // 5 + the re-enqueued one + 2 hand-written entries
		t.Fatalf("promoted %d entries, want 8", promoted)
	}
	for id, want := range map[string]time.Time{far[0]: due, far[3]: due, far[4]: due, far[2]: due2} {
		sc, err := rdb.ZScore(ctx, l.Delayed(sh), id).Result()
		if err != nil || int64(sc) != want.UnixMilli() {
			t.Fatalf("%s promoted at %v (%v), want its due time %d", id, sc, err, want.UnixMilli())
		}
	}
	if _, err := rdb.ZScore(ctx, l.Delayed(sh), far[1]).Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("cancelled task promoted: %v", err)
	}
	if n := rdb.Exists(ctx, l.Far(sh), l.FarBucket(sh, strconv.FormatInt(bucket, 10))).Val(); n != 0 {
		t.Fatalf("%d far-tier keys left after promotion", n)
	}
	// Then everything is moved when due; the garbage is buried.
	testenv.WaitFor(t, 10*time.Second, "all due tasks moved", func() (bool, string) {
		if _, err := s.Move(ctx, sh, 1, 100); err != nil {
			t.Fatal(err)
		}
		n := rdb.ZCard(ctx, l.Delayed(sh)).Val()
		return n == 0, fmt.Sprintf("%d left in the delayed set", n)
	})
	if n := rdb.LLen(ctx, l.Ready(sh, "default")).Val(); n != 5 { // 4 far + 1 near
		t.Fatalf("ready list holds %d, want 5", n)
	}
	if _, err := rdb.ZScore(ctx, l.Dead(sh), garbage).Result(); err != nil {
		t.Fatalf("garbage not dead-lettered: %v", err)
	}
}

// TestFarTierOff: with the tier off (the default, or turned off), every
// task goes to the delayed set; buckets stored before stay in the tier
// (the mover promotes them whatever the setting; see TestFarTier).
func TestFarTierOff(t *testing.T) {
	t.Parallel()
	s, rdb := newTestStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	l := s.Layout()
	id := "off-0"
	if r := s.Enqueue(ctx, EnqueueArgs{ID: id, Queue: "default", Delay: time.Hour}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if _, err := rdb.ZScore(ctx, l.Delayed(l.ShardOf(id)), id).Result(); err != nil {
		t.Fatalf("tier off by default, yet not in the delayed set: %v", err)
	}
	if err := s.SetFarTier(ctx, FarTier{Bucket: time.Minute, Lead: time.Second}); err != nil {
		t.Fatal(err)
	}
	id2 := "off-1"
	if r := s.Enqueue(ctx, EnqueueArgs{ID: id2, Queue: "default", Delay: time.Hour}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if err := s.SetFarTier(ctx, FarTier{}); err != nil {
		t.Fatal(err)
	}
	if n := rdb.ZCard(ctx, l.Far(l.ShardOf(id2))).Val(); n != 1 {
		t.Fatalf("far tier holds %d buckets, want 1", n)
	}
	id3 := "off-2"
	if r := s.Enqueue(ctx, EnqueueArgs{ID: id3, Queue: "default", Delay: time.Hour}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if _, err := rdb.ZScore(ctx, l.Delayed(l.ShardOf(id3)), id3).Result(); err != nil {
		t.Fatalf("tier turned off, yet not in the delayed set: %v", err)
	}
}

// TestFarTierWake: an enqueue into the far tier wakes the shard's owner
// only when it moves the far tier's member "|far" earlier (a first
// bucket, or an earlier one), not for a bucket that is already due to be
// promoted sooner, and never when a nearer task stays the head.
func TestFarTierWake(t *testing.T) {
	t.Parallel()
	s, rdb := newTestStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	l := s.Layout()
	const sh = 1
	if err := s.SetFarTier(ctx, FarTier{Bucket: time.Minute, Lead: time.Second}); err != nil {
		t.Fatal(err)
	}
	w := listenWakes(t, ctx, rdb, l, sh)
	ids := shardIDs(l, sh, "fw", 5)
	base := time.Now().Add(time.Hour).Truncate(time.Minute)
	enq := func(id string, due time.Time) {
		t.Helper()
		if r := s.Enqueue(ctx, EnqueueArgs{ID: id, Queue: "default", Due: due, MaxRetries: -1}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	promote := func(due time.Time) string {
		return strconv.FormatInt(due.Truncate(time.Minute).UnixMilli()-1000, 10)
	}
	enq(ids[0], base.Add(10*time.Minute))             // first bucket: wake at its promotion
	enq(ids[1], base.Add(20*time.Minute))             // later bucket: no wake
	enq(ids[2], base.Add(10*time.Minute+time.Second)) // same bucket: no wake
	enq(ids[3], base)                                 // earlier bucket: wake
	w.expect(promote(base.Add(10*time.Minute)), promote(base))
	// A near task (under a second ahead, so never in the far tier) becomes
	// the head: a wake-up; a far one after it moves "|far" earlier but not
	// to the head: none.
	near := time.Now().Add(500 * time.Millisecond).UnixMilli()
	enq(ids[4], time.UnixMilli(near))
	w.expect(strconv.FormatInt(near, 10))
	enq(shardIDs(l, sh, "fw2", 1)[0], base.Add(-time.Minute))
	w.none()
}
