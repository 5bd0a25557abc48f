package e2e_test

import (
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/promread"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestCanaryRouting (#29): a stable and a canary worker binary (worker.tags
// canary) on one queue routed "not canary" at run time: the canary runs
// none of 2,000 tasks (10,000 in TestSoakCanaryRouting). Switched at run
// time (hourglass queue route --share 10 --share-tag canary) to a 10%
// share (of 16 shards: one, and a second for 60% of each period), the
// canary runs 8-12% of the next batch, due over two periods (printed). Routed
// "not canary" again and once the stable worker stops, the queue has no
// eligible worker, which queue ls, inspect and the schedulers' metric
// say.
func TestCanaryRouting(t *testing.T) {
	testenv.Parallel(t)
	testCanaryRouting(t, 2000)
}

// TestSoakCanaryRouting is TestCanaryRouting with 10,000 tasks, the
// figure #29 asks for (make soak).
func TestSoakCanaryRouting(t *testing.T) {
	testenv.SkipUnlessSoak(t)
	testenv.Parallel(t)
	testCanaryRouting(t, 10000)
}

func testCanaryRouting(t *testing.T, n int) {
	c := newCluster(t)
	var mu sync.Mutex
	ran := map[string]int{} // worker -> tasks run
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		ran[strings.Trim(r.URL.Path, "/")]++
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(target.Close)
	args := func(who string) []string { return workerArgs(target.URL+"/"+who, 10*time.Second, 32) }
	s := c.start("cn-s", args("none")...)
	testenv.WaitFor(t, 20*time.Second, "the scheduler owns all shards", func() (bool, string) { return c.settled("cn-s") })
	ctx := testenv.Ctx(t, 2*time.Minute)
	in, err := inspect.New(c.rdb, inspect.Config{Shards: nShards})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.SetRouting(ctx, "default", inspect.Routing{NotTags: []string{"canary"}}); err != nil {
		t.Fatal(err)
	}
	stable := c.startWorker("cn-stable", append(args("stable"), "-set", "worker.version=1.0.0")...)
	canary := c.startWorker("cn-canary", append(args("canary"), "-set", "worker.version=1.1.0-rc1", "-set", "worker.tags=canary")...)
	gauge := func(p *sched, name string) (float64, error) {
		fams, err := promread.Families(ctx, "http://"+p.http+"/metrics")
		if err != nil {
			return 0, err
		}
		return promread.Counter(fams, name)
	}
	testenv.WaitFor(t, 20*time.Second, "the canary excluded, the stable worker not", func() (bool, string) {
		cx, err1 := gauge(canary, "hourglass_worker_queue_excluded")
		sx, err2 := gauge(stable, "hourglass_worker_queue_excluded")
		return err1 == nil && err2 == nil && cx == 1 && sx == 0, fmt.Sprintf("canary %v %v, stable %v %v", cx, err1, sx, err2)
	})
	qs, _, err := in.Queues(ctx)
	if err != nil || len(qs) != 1 || qs[0].Workers != 1 || qs[0].Routing == nil {
		t.Fatalf("queues with one eligible worker of two: %+v %v", qs, err)
	}

	// batch enqueues n tasks, due over the next spread.
	batch := func(prefix string, spread time.Duration) (ids []string) {
		for b := 0; b < n; b += 1000 {
			tasks := make([]client.Task, 1000)
			for i := range tasks {
				tasks[i] = client.Task{ID: fmt.Sprintf("%s-%05d", prefix, b+i), Queue: "default", Delay: spread * time.Duration(b+i) / time.Duration(n)}
				ids = append(ids, tasks[i].ID)
			}
			if _, err := c.cli.EnqueueBatch(ctx, tasks); err != nil {
				t.Fatal(err)
			}
		}
		return ids
	}
	// done waits for the batch to run and returns what each worker ran
	// of it.
	done := func(before map[string]int) map[string]int {
		delta := map[string]int{}
		testenv.WaitFor(t, 90*time.Second, "every task run", func() (bool, string) {
			mu.Lock()
			defer mu.Unlock()
			for w, k := range ran {
				delta[w] = k - before[w]
			}
			return delta["stable"]+delta["canary"] >= n, fmt.Sprint(delta)
		})
		return delta
	}
	batch("cn", 0)
	by := done(map[string]int{})
	t.Logf("not canary: %v of %d tasks", by, n)
	if by["canary"] != 0 {
		t.Errorf("the canary ran %d of %d tasks of a queue routed not canary", by["canary"], n)
	}

	// A 10% share for the canaries, at run time.
	cli := newCLI(t, c)
	if out, errOut, code := cli.run("queue", "route", "default", "--share", "10", "--share-tag", "canary"); code != 0 {
		t.Fatalf("queue route --share: exit %d, %q %q", code, out, errOut)
	}
	share := inspect.Share{Percent: 10, Tags: []string{"canary"}}
	testenv.WaitFor(t, 20*time.Second, "both workers on their side of the share", func() (bool, string) {
		cs, err1 := gauge(canary, "hourglass_worker_queue_share")
		ss, err2 := gauge(stable, "hourglass_worker_queue_share")
		return err1 == nil && err2 == nil && cs == 10 && ss == 90, fmt.Sprintf("canary %v %v, stable %v %v", cs, err1, ss, err2)
	})
	mu.Lock()
	before := maps.Clone(ran)
	mu.Unlock()
	// Due over two periods of the boundary shard's split (10% of 16
	// shards: one shard, and a second for 60% of each period).
	batch("sh", 2*shard.SharePeriod)
	by = done(before)
	full, part := share.Split(nShards)
	frac := float64(by["canary"]) / float64(n)
	t.Logf("share 10%% (%d shards of %d, and one more %d%% of the time): the canary ran %d of %d tasks (%.1f%%)", full, nShards, part, by["canary"], n, 100*frac)
	if frac < 0.08 || frac > 0.12 {
		t.Errorf("the canary ran %.1f%% of the tasks under a 10%% share", 100*frac)
	}
	if out, _, code := cli.run("queue", "ls"); code != 0 || !strings.Contains(out, "(1 canary)") {
		t.Errorf("queue ls with a share: exit %d, %q", code, out)
	}
	if err := in.SetRouting(ctx, "default", inspect.Routing{NotTags: []string{"canary"}}); err != nil {
		t.Fatal(err)
	}

	if err := stable.Terminate(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "no eligible worker", func() (bool, string) {
		qs, _, err := in.Queues(ctx)
		if err != nil || len(qs) != 1 {
			return false, fmt.Sprint(qs, err)
		}
		return qs[0].Workers == 0, fmt.Sprint(qs[0].Workers, " eligible")
	})
	if v, err := gauge(s, "hourglass_queue_eligible_workers"); err != nil || v != 0 {
		t.Errorf("hourglass_queue_eligible_workers: %v %v, want 0", v, err)
	}
	out, errOut, code := cli.run("queue", "ls")
	if code != 0 || !strings.Contains(out, "none eligible") {
		t.Errorf("queue ls: exit %d, %q %q", code, out, errOut)
	}
}
