package shard

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestMoveAhead: with a prefetch, move.lua also moves tasks due within it
// (reporting them early: negative lateness), in due order, and leaves the
// rest, reporting the next due time beyond the prefetch. A far-tier
// bucket whose promotion time falls within the prefetch is promoted by
// the same call: were it not, the mover would be told to come back at a
// time that has already come, and call again and again.
func TestMoveAhead(t *testing.T) {
	t.Parallel()
	s, rdb := newTestStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	l := s.Layout()
	const sh = 1
	ids := shardIDs(l, sh, "ahead", 3)
	for i, delay := range []time.Duration{0, 300 * time.Millisecond, time.Minute} {
		if r := s.Enqueue(ctx, EnqueueArgs{ID: ids[i], Queue: "default", Delay: delay}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	// Without a prefetch only the due task would move; with 10 s, the
	// first two.
	res, err := s.MoveAhead(ctx, sh, 1, 100, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.Moved != 2 || len(res.Late) != 2 || res.Late[0] < 0 || res.Late[1] >= 0 {
		t.Fatalf("moved %d, lateness %v: want 2, the second one early", res.Moved, res.Late)
	}
	if res.NextDue <= res.Now+10000 {
		t.Fatalf("next due %d not beyond now %d + the prefetch", res.NextDue, res.Now)
	}
	ready := rdb.LRange(ctx, l.Ready(sh, "default"), 0, -1).Val()
	if len(ready) != 2 {
		t.Fatalf("ready list %v, want 2 entries", ready)
	}
	for i, e := range ready {
		d, ok := s.Popped(sh, e, time.Now(), time.Second)
		if !ok || d.Task.ID != ids[i] {
			t.Fatalf("ready entry %d is %q, want %s (due order)", i, e, ids[i])
		}
	}

	// The far tier: a bucket promoted 1 s before it starts, its task due
	// about 3.5 s from now, so its promotion time is 1.5 to 2.5 s away.
	if err := s.SetFarTier(ctx, FarTier{Bucket: time.Second, Lead: time.Second}); err != nil {
		t.Fatal(err)
	}
	far := shardIDs(l, sh, "farahead", 1)[0]
	if r := s.Enqueue(ctx, EnqueueArgs{ID: far, Queue: "default", Delay: 3500 * time.Millisecond}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if _, err := rdb.ZScore(ctx, l.Delayed(sh), far).Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("far task not in the far tier: %v", err)
	}
	res, err = s.MoveAhead(ctx, sh, 1, 100, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.Promoted != 1 {
		t.Fatalf("a bucket due for promotion within the prefetch: promoted %d, next due %d (now %d)", res.Promoted, res.NextDue, res.Now)
	}
	if _, err := rdb.ZScore(ctx, l.Delayed(sh), far).Result(); err != nil {
		t.Fatalf("far task not promoted into the delayed set: %v", err)
	}
}
