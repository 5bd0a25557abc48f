package fire

import (
	"context"
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
	"github.com/hourglass-sched/hourglass/periodic"
)

func nameIn(prefix string, n, sh int) string {
	for i := 0; ; i++ {
		if s := fmt.Sprint(prefix, i); int(crc32.ChecksumIEEE([]byte(s))%uint32(n)) == sh {
			return s
		}
	}
}

// Finding: takeOver fails the whole shard's run while any one arriving
// schedule is not handed over. A schedule registered at run time after
// its old home was recorded done is never handed over in this change, so
// the new home fires none of its schedules, also those that do not move,
// until the change ends (then catch-up skip drops what was missed).
func TestReviewOneUnhandedScheduleStopsTheWholeNewHome(t *testing.T) {
	e := shardtest.New(t, shardtest.Options{Shards: 4, Queues: map[string]shard.QueuePolicy{"q": shardtest.Policy()}})
	ctx := testenv.Ctx(t, time.Minute)
	stay := compile(t, periodic.Schedule{Name: nameIn("stay-", 4, 0), Queue: "q", Interval: time.Second, MaxRetries: -1})
	arrive := compile(t, periodic.Schedule{Name: nameIn("arrive-", 4, 2), Queue: "q", Interval: time.Second, MaxRetries: -1})

	// A task in flight in shard 3 keeps the change 4 -> 2 open.
	busy := e.IDsIn(3, 1, "busy-")[0]
	e.Ready("q", busy)
	_, entries, err := e.Store.Pop(ctx, []string{e.Layout().Ready(3, "q")}, 1, time.Second)
	if err != nil || len(entries) != 1 {
		t.Fatalf("pop: %v %v", entries, err)
	}
	if ds, err := e.Store.Claim(ctx, 3, "q", entries, time.Minute); err != nil || len(ds) != 1 {
		t.Fatalf("claim: %v %v", ds, err)
	}

	if _, err := e.Store.BeginResize(ctx, 2); err != nil {
		t.Fatal(err)
	}
	f, err := New(e.Store, Config{Schedules: []*periodic.Compiled{stay}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := reshard.New(e.Store, reshard.Config{Retry: 50 * time.Millisecond, Schedules: f.Names})
	if err != nil {
		t.Fatal(err)
	}
	loops := []owner.Loop{{Name: "periodic", Run: f.Run}, {Name: "reshard", Run: m.Run}}
	e.Own(loops...) // shards 0, 1 (Own covers Shards, not Span)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{}, 2)
	t.Cleanup(func() { stop(); <-done; <-done })
	for sh := 2; sh < 4; sh++ {
		go func() {
			_ = owner.Run(rctx, owner.Shard{ID: sh, Epoch: shardtest.Epoch}, loops)
			done <- struct{}{}
		}()
	}
	testenv.WaitFor(t, 10*time.Second, "shard 2 done", func() (bool, string) {
		r, err := e.Store.ReadLayout(ctx)
		return err == nil && slices.Contains(r.Done, 2), fmt.Sprint(r.Done, err)
	})
	testenv.WaitFor(t, 10*time.Second, "stay fires", func() (bool, string) {
		return len(occurrences(t, e, stay.Name)) >= 2, fmt.Sprint(occurrences(t, e, stay.Name))
	})
	// "arrive" is registered at run time (inspect.SetSchedule) now.
	f.SetSchedules([]*periodic.Compiled{stay, arrive})
	before := len(occurrences(t, e, stay.Name))
	time.Sleep(4 * time.Second)
	if after := len(occurrences(t, e, stay.Name)); after <= before+1 {
		t.Fatalf("BUG: %s (home 0, not moving) fired %d times in 4 s after %s was registered: the whole shard waits for a hand-over that never comes", stay.Name, after-before, arrive.Name)
	}
}
