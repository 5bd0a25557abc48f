package worker

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestFairQueueGivesQuietKeysTurns: one key's backlog of 300 tasks is
// due before five other keys' one task each. In due order (FIFO) those
// five would start last; in a fair queue (window 2 per shard) each starts
// within a few turns of the worker's, and every task runs once.
func TestFairQueueGivesQuietKeysTurns(t *testing.T) {
	t.Parallel()
	p := shardtest.Policy()
	p.FairWindow = 2
	e := newEnv(t, p)
	var big []string
	for i := range 300 {
		big = append(big, fmt.Sprintf("{big}%03d", i))
	}
	e.Schedule("q", 0, big...)
	quiet := []string{"{q1}x", "{q2}x", "{q3}x", "{q4}x", "{q5}x"}
	e.Schedule("q", 0, quiet...)

	var mu sync.Mutex
	var order []string
	runs := map[string]int{}
	h := func(ctx context.Context, task *Task) error {
		mu.Lock()
		order = append(order, task.ID)
		runs[task.ID]++
		mu.Unlock()
		time.Sleep(time.Millisecond)
		return nil
	}
	e.start(e.RDB, QueueOptions{Concurrency: 1}, h)
	testenv.WaitFor(t, 60*time.Second, "every task run", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(runs) == len(big)+len(quiet), fmt.Sprint(len(runs))
	})
	mu.Lock()
	defer mu.Unlock()
	for id, n := range runs {
		if n != 1 {
			t.Errorf("%s ran %d times", id, n)
		}
	}
	// Each shard's window holds 2 and its ring turns between the keys
	// waiting in it: a quiet key's task starts within a few turns of each
	// shard (the worker pops the shards in turn), far ahead of the
	// backlog's 300.
	last := 0
	for _, id := range quiet {
		i := slices.Index(order, id)
		last = max(last, i)
		if i < 0 || i > 4*shards*2 {
			t.Errorf("%s started %dth, want among the first %d", id, i+1, 4*shards*2+1)
		}
	}
	t.Logf("the quiet keys' last task started %dth of %d", last+1, len(order))
	// Within one key and shard, due order holds.
	bigOrder := map[int][]string{}
	for _, id := range order {
		if strings.HasPrefix(id, "{big}") {
			sh := testenv.ShardOf(id, shards)
			bigOrder[sh] = append(bigOrder[sh], id)
		}
	}
	for sh, ids := range bigOrder {
		if !slices.IsSorted(ids) {
			t.Errorf("the big key's tasks of shard %d started out of order: %v", sh, ids)
		}
	}
}
