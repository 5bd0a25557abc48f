package reshard_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/owner"
	"github.com/hourglass-sched/hourglass/internal/reshard"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

type afterCmd struct {
	once  sync.Once
	match func(redis.Cmder) bool
	fn    func()
}

func (h *afterCmd) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *afterCmd) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if h.match(cmd) {
			h.once.Do(h.fn)
		}
		return err
	}
}
func (h *afterCmd) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Finding: the next owner (B) reads the outbox before it has run any
// fenced script; the old owner (A, a zombie whose lease expired, still
// connected to Redis) commits its batch in that window, which its epoch
// still allows. B re-imports (skipped: already imported), its commit finds
// no entries and takes them for cancelled, and Unimport deletes the only
// copies: every task of the batch is lost.
func TestReviewZombieCommitMakesNextOwnerUnimportLiveTasks(t *testing.T) {
	e := shardtest.New(t, shardtest.Options{Shards: 1})
	ctx := testenv.Ctx(t, time.Minute)
	// Owner A (epoch 1): export and import, then it stalls before its commit.
	_, l, away, exported := exportAway(t, e, 2, 50, "z-")
	if _, err := e.Store.Import(ctx, l, 1, exported); err != nil {
		t.Fatal(err)
	}
	// Owner B (epoch 2) starts its pass; A's commit lands right after B
	// read the outbox.
	h := &afterCmd{match: func(c redis.Cmder) bool {
		a := c.Args()
		n, _ := a[0].(string)
		k, _ := a[1].(string)
		return n == "hgetall" && k == l.Outbox(0)
	}, fn: func() {
		if _, err := e.Store.Commit(ctx, 0, shardtest.Epoch, away); err != nil {
			t.Errorf("zombie commit: %v", err)
		}
	}}
	rdbB := redis.NewClient(&redis.Options{Addr: e.RDB.Options().Addr})
	t.Cleanup(func() { rdbB.Close() })
	rdbB.AddHook(h)
	storeB := shard.NewStore(rdbB, l)
	m, err := reshard.New(storeB, reshard.Config{Retry: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for sh := range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); _ = m.Run(runCtx, owner.Shard{ID: sh, Epoch: shardtest.Epoch + 1}) }()
	}
	t.Cleanup(func() { stop(); wg.Wait() })
	waitStable(t, e, 1)
	lost := 0
	for _, id := range away {
		if e.State(id) == "gone" {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("BUG: %d of %d scheduled tasks were deleted by the migration", lost, len(away))
	}
}

// Finding: a resharder whose store still has the previous change's layout
// (generation 1, migrating 2 -> 4) runs a pass on a newly acquired shard
// after generation 2 (4 -> 2) has ended: it moves a task that producers
// placed by 2 shards back to its shard among 4, a dropped shard nobody
// owns or scans. Export/Import do not check the shard's marker.
func TestReviewStaleGenerationMigratorStrandsTasksInADroppedShard(t *testing.T) {
	e := shardtest.New(t, shardtest.Options{Shards: 2})
	ctx := testenv.Ctx(t, time.Minute)
	m, err := reshard.New(e.Store, reshard.Config{Retry: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	g1, err := e.Store.BeginResize(ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	e.Own(owner.Loop{Name: "reshard", Run: m.Run}) // owners of shards 0, 1
	// The owners of the new shards 2 and 3.
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { stop(); wg.Wait() })
	for sh := 2; sh < 4; sh++ {
		wg.Add(1)
		go func() { defer wg.Done(); _ = m.Run(runCtx, owner.Shard{ID: sh, Epoch: shardtest.Epoch}) }()
	}
	waitStable(t, e, 1)
	if _, err := e.Store.BeginResize(ctx, 2); err != nil {
		t.Fatal(err)
	}
	m.LayoutChanged()
	waitStable(t, e, 2)

	// A producer on generation 2 stores X in shard 1; X's shard among 4 is 3.
	var x string
	for i := 0; ; i++ {
		if x = "x-" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)); shardOf(x, 2) == 1 && shardOf(x, 4) == 3 {
			break
		}
	}
	e.Schedule(shardtest.Queue, time.Hour, x)

	// A replica that missed the end of generation 1 acquires shard 1.
	stale := shard.NewStore(e.RDB, g1)
	sm, err := reshard.New(stale, reshard.Config{Retry: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	sctx, sstop := context.WithTimeout(ctx, 2*time.Second)
	defer sstop()
	_ = sm.Run(sctx, owner.Shard{ID: 1, Epoch: shardtest.Epoch + 5})

	if e.RDB.HExists(ctx, e.Layout().Tasks(3), x).Val() {
		t.Fatalf("BUG: %s was moved into shard 3, which generation 2 dropped: no owner, no worker pops it, lookups miss it (state %q)", x, e.State(x))
	}
}
