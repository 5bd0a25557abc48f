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

// TestMoveCountsTheBatchAhead: with a window, a move call reports how many
// tasks are due from the next due time to that time plus the window (the
// mover's measure of a dense batch), on the one-task path, on the batch
// path and in a combined call; without a window, none.
func TestMoveCountsTheBatchAhead(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	l := s.Layout()
	const sh = 2
	base := time.Now().Truncate(time.Millisecond)
	// One task due now, then 7 due at one instant a minute out, 2 more
	// 30 ms after them and 1 a second after that.
	ids := shardIDs(l, sh, "dense", 11)
	dues := []time.Time{base.Add(-time.Second)}
	for range 7 {
		dues = append(dues, base.Add(time.Minute))
	}
	dues = append(dues, base.Add(time.Minute+30*time.Millisecond), base.Add(time.Minute+30*time.Millisecond), base.Add(time.Minute+time.Second))
	for i, due := range dues {
		if r := s.Enqueue(ctx, EnqueueArgs{ID: ids[i], Queue: "default", Due: due}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	next := base.Add(time.Minute).UnixMilli()
	// The one-task path: one task due.
	res, err := s.MoveShard(ctx, MoveRequest{Shard: sh, Epoch: 1, Limit: 100, Window: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Moved != 1 || res.NextDue != next || res.Ahead != 9 || len(res.Late) != 1 {
		t.Fatalf("one-task move: %+v, want 1 moved, next due %d and 9 tasks within 50 ms of it", res, next)
	}
	// Nothing due (the batch path's reply): a narrower window counts the
	// 7 due at the next due time alone.
	res, err = s.MoveShard(ctx, MoveRequest{Shard: sh, Epoch: 1, Limit: 100, Window: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Moved != 0 || res.NextDue != next || res.Ahead != 7 || len(res.Late) != 0 {
		t.Fatalf("move with nothing due: %+v, want next due %d and 7 ahead", res, next)
	}
	// A combined call reports each shard's own count.
	out := s.MoveMany(ctx, []MoveRequest{{Shard: sh, Epoch: 1, Limit: 100, Window: 2 * time.Second}, {Shard: sh + 1, Epoch: 1, Limit: 100, Window: time.Second}})
	if out[0].Err != nil || out[1].Err != nil || out[0].Result.Ahead != 10 || out[1].Result.Ahead != 0 || out[1].Result.NextDue != -1 {
		t.Fatalf("combined move: %+v, want 10 ahead in shard %d and none in the empty shard", out, sh)
	}
	// Without a window nothing is counted.
	if res, err := s.MoveAhead(ctx, sh, 1, 100, 0); err != nil || res.Ahead != 0 {
		t.Fatalf("move without a window: %+v, %v", res, err)
	}
}
