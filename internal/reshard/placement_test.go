package reshard_test

import (
	"fmt"
	"hash/crc32"
	"slices"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/owner"
	"github.com/hourglass-sched/hourglass/internal/reshard"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// keyShard returns a keyed id's shard of n under PlaceByKey: crc32 of its
// key.
func keyShard(id string, n int) int {
	k := shard.KeyOf(id)
	if k == "" {
		panic("keyShard of the keyless id " + id)
	}
	return int(crc32.ChecksumIEEE([]byte(k)) % uint32(n))
}

// TestPlacementByKey: switching a namespace to placement by key (same
// shard count) moves every keyed task, scheduled or dead, to its key's
// shard and leaves keyless ones where they are; a producer still on the
// old layout is redirected and stores by key; a later change of the count
// keeps the rule.
func TestPlacementByKey(t *testing.T) {
	t.Parallel()
	e := shardtest.New(t, shardtest.Options{Shards: 4})
	ctx := testenv.Ctx(t, time.Minute)
	var keyed, plain []string
	for i := range 200 {
		keyed = append(keyed, fmt.Sprintf("{tenant-%d}order-%d", i%7, i))
		plain = append(plain, fmt.Sprintf("plain-%d", i))
	}
	spread := map[int]bool{}
	for _, id := range keyed[:7] {
		spread[e.Layout().ShardOf(id)] = true
	}
	if len(spread) < 2 {
		t.Fatalf("the keyed ids of one key should spread by id before the change: %v", spread)
	}
	e.Schedule(shardtest.Queue, time.Hour, keyed...)
	e.Schedule(shardtest.Queue, time.Hour, plain...)
	stale := shard.NewStore(e.RDB, e.Layout())

	l, err := e.Store.BeginChange(ctx, 4, shard.PlaceByKey)
	if err != nil {
		t.Fatal(err)
	}
	if !l.Resharding() || l.Placement() != shard.PlaceByKey || l.FromPlacement() != shard.PlaceByID || l.Existing() != 4 {
		t.Fatalf("layout after BeginChange: resharding %v, placement %s from %s, %d shards", l.Resharding(), l.Placement(), l.FromPlacement(), l.Existing())
	}
	// The stale producer is redirected to the new rule.
	late := "{tenant-3}late"
	if r := stale.Enqueue(ctx, shard.EnqueueArgs{ID: late, Queue: shardtest.Queue, Delay: time.Hour, MaxRetries: -1}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if p := stale.Layout().Placement(); p != shard.PlaceByKey {
		t.Errorf("the stale producer's placement after the redirect: %s", p)
	}
	// Every id is found during the change, wherever it is.
	for _, id := range slices.Concat(keyed[:20], plain[:20]) {
		if s := e.State(id); s != "scheduled" {
			t.Fatalf("%s during the change: %s", id, s)
		}
	}

	m, err := reshard.New(e.Store, reshard.Config{Retry: 50 * time.Millisecond, Batch: 64})
	if err != nil {
		t.Fatal(err)
	}
	e.Own(owner.Loop{Name: "reshard", Run: m.Run})
	rec := waitStable(t, e, 1)
	if rec.Placement != shard.PlaceByKey || rec.Shards != 4 {
		t.Fatalf("record after the change: %+v", rec)
	}
	for _, id := range slices.Concat(keyed, []string{late}) {
		if !e.RDB.HExists(ctx, e.Layout().Tasks(keyShard(id, 4)), id).Val() {
			t.Errorf("%s is not in its key's shard %d", id, keyShard(id, 4))
		}
	}
	checkPlaced(t, e, 4, "scheduled", plain...)
	if v := e.RDB.Get(ctx, e.Layout().Marker(0)).Val(); v != "1|4k|0" {
		t.Errorf("marker after the change: %q, want 1|4k|0", v)
	}

	// A change of the count keeps placing by key.
	if _, err := e.Store.BeginResize(ctx, 3); err != nil {
		t.Fatal(err)
	}
	m.LayoutChanged()
	rec = waitStable(t, e, 2)
	if rec.Placement != shard.PlaceByKey || rec.Shards != 3 {
		t.Fatalf("record after the resize: %+v", rec)
	}
	for _, id := range keyed {
		if !e.RDB.HExists(ctx, e.Layout().Tasks(keyShard(id, 3)), id).Val() {
			t.Errorf("%s is not in its key's shard %d of 3", id, keyShard(id, 3))
		}
	}
	checkPlaced(t, e, 3, "scheduled", plain...)

	// And back to placement by id.
	if _, err := e.Store.BeginChange(ctx, 3, shard.PlaceByID); err != nil {
		t.Fatal(err)
	}
	m.LayoutChanged()
	waitStable(t, e, 3)
	checkPlaced(t, e, 3, "scheduled", keyed...)
	checkPlaced(t, e, 3, "scheduled", plain...)
}
