package e2e_test

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestResultsFromTheHTTPWorker (#27): in a queue with a 3 s retention,
// the worker binary keeps each HTTP answer's body as its task's result;
// client.Wait, called before the tasks run, returns each one; and once
// the retention has passed, the schedulers' recovery passes delete every
// record (the ended hashes and indexes are gone).
func TestResultsFromTheHTTPWorker(t *testing.T) {
	testenv.Parallel(t)
	c := newCluster(t)
	tg := newTarget(t)
	tg.setBehave(func(w http.ResponseWriter, _ *http.Request, id string, _ int) bool {
		fmt.Fprintf(w, "receipt of %s", id)
		return true
	})
	args := append(workerArgs(tg.URL, 30*time.Second, 16), "-set", "queues.default.retention=3s")
	c.start("r-1", args...)
	testenv.WaitFor(t, 20*time.Second, "1 replica owns the 16 shards", func() (bool, string) { return c.settled("r-1") })
	c.startWorker("rw-1", args...)
	ctx := testenv.Ctx(t, 2*time.Minute)

	const n = 40
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		id := fmt.Sprintf("res-%d", i)
		if _, err := c.cli.Enqueue(ctx, client.Task{ID: id, Queue: "default", Delay: time.Second}); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			info, err := c.cli.Wait(ctx, id)
			if err == nil && (info.State != client.StateSucceeded || string(info.Result) != "receipt of "+id) {
				err = fmt.Errorf("Wait(%s) = %+v", id, info)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	l, err := shard.NewLayout("hourglass", nShards)
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "every record deleted after the retention", func() (bool, string) {
		var keys []string
		for sh := range l.Shards() {
			keys = append(keys, l.Ended(sh), l.EndedIndex(sh, "default"))
		}
		left, err := c.rdb.Exists(ctx, keys...).Result()
		return err == nil && left == 0, fmt.Sprintf("%d keys left (%v)", left, err)
	})
	if _, err := c.cli.Result(ctx, "res-0"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("Result after the retention: %v, want not found", err)
	}
}
