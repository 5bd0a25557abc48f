package e2e_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestFairQueueBinaries: the scheduler binary registers a fair queue
// from its configuration (queues.default.fair), and the worker binary,
// configured with nothing about it, reads it and refills the windows
// after its pops. One key's 400 tasks are due before five other keys'
// one each; with one handler at a time, the quiet keys' tasks reach the
// HTTP target among the first deliveries, and every task arrives.
func TestFairQueueBinaries(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	tg := newTarget(t)
	args := append(workerArgs(tg.URL, 5*time.Second, 1), "-set", "queues.default.fair=true", "-set", "queues.default.fair_window=4")
	c.start("fair-s", args...)
	testenv.WaitFor(t, 20*time.Second, "replica owns all shards", func() (bool, string) { return c.settled("fair-s") })
	in, err := inspect.New(c.rdb, inspect.Config{Shards: nShards})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Ctx(t, 2*time.Minute)
	if q, err := in.Queue(ctx, "default"); err != nil || q.FairWindow != 4 {
		t.Fatalf("queue as registered: %+v, %v; want fair window 4", q, err)
	}
	// Due together, 2 s from now: the mover moves them in the same calls
	// (tasks moved while the window is full of the big key's would wait
	// a turn behind it).
	due := time.Now().Add(2 * time.Second)
	var big []client.Task
	for i := range 400 {
		big = append(big, client.Task{Queue: "default", Key: "big", ID: fmt.Sprintf("%03d", i), At: due})
	}
	if _, err := c.cli.EnqueueBatch(ctx, big); err != nil {
		t.Fatal(err)
	}
	var quiet []string
	for i := range 5 {
		r, err := c.cli.Enqueue(ctx, client.Task{Queue: "default", Key: fmt.Sprintf("quiet-%d", i), ID: "x", At: due})
		if err != nil {
			t.Fatal(err)
		}
		quiet = append(quiet, r.ID)
	}
	testenv.WaitFor(t, 20*time.Second, "every task moved", func() (bool, string) {
		q, err := in.Queue(ctx, "default")
		return err == nil && q.Counts.Scheduled == 0 && q.Counts.Ready == 405, fmt.Sprintf("%+v %v", q.Counts, err)
	})
	c.startWorker("fair-w", args...)
	testenv.WaitFor(t, time.Minute, "every task delivered", func() (bool, string) {
		n, _ := tg.delivered()
		return n == 405, fmt.Sprint(n)
	})
	tg.mu.Lock()
	ids := make([]string, 0, len(tg.first))
	for id := range tg.first {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b string) int { return tg.first[a].Compare(tg.first[b]) })
	tg.mu.Unlock()
	// Each shard's window holds 4, a turn each for the keys waiting in it
	// (the big key's tasks sort first): a quiet key's task is among the
	// first two of its shard's window, and the worker pops the shards in
	// turn.
	for _, id := range quiet {
		if i := slices.Index(ids, id); i < 0 || i >= 4*nShards {
			t.Errorf("%s delivered %dth, want among the first %d of 405", id, i+1, 4*nShards)
		}
	}
}
