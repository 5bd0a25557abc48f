package e2e_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/internal/backoff"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestRescheduleUnderRaces: tasks rescheduled at random, earlier and
// later, while the movers and HTTP worker binaries run and the shard
// count grows 16 -> 24: every task runs exactly once, at the due time of
// its last successful reschedule, never before it. A quarter start in the
// far tier (two hours ahead) and are brought forward. 400 tasks and one
// worker here (make test runs beside it, its binaries built with the
// race detector); TestSoakRescheduleUnderRaces runs 10,000 and two.
func TestRescheduleUnderRaces(t *testing.T) { testReschedule(t, 400) }

// TestSoakRescheduleUnderRaces is TestRescheduleUnderRaces with 10,000
// tasks (make soak).
func TestSoakRescheduleUnderRaces(t *testing.T) {
	testenv.SkipUnlessSoak(t)
	testReschedule(t, 10000)
}

func testReschedule(t *testing.T, n int) {
	testenv.Parallel(t)
	c := newCluster(t)
	tg := newTarget(t)
	args := workerArgs(tg.URL, 30*time.Second, 64)
	c.start("s-1", args...)
	c.start("s-2", args...)
	testenv.WaitFor(t, 20*time.Second, "2 replicas own the 16 shards", func() (bool, string) { return c.settled("s-1", "s-2") })
	workers := []*sched{c.startWorker("w-1", args...)}
	if n >= 10000 {
		workers = append(workers, c.startWorker("w-2", args...))
	}
	ctx := testenv.Ctx(t, 4*time.Minute)

	// want is each id's due time: the enqueue's, then that of each
	// reschedule that succeeded. Calls for one id come from one goroutine
	// (ids are split by index), so the last success is the last call.
	var mu sync.Mutex
	want := map[string]time.Time{}
	ids := make([]string, n)
	tasks := make([]client.Task, n)
	now := time.Now()
	for i := range tasks {
		ids[i] = fmt.Sprintf("r-%d", i)
		at := now.Add(3*time.Second + time.Duration(rand.IntN(7000))*time.Millisecond)
		if i%4 == 0 {
			at = now.Add(2 * time.Hour) // the far tier
		}
		at = at.Truncate(time.Millisecond)
		tasks[i] = client.Task{ID: ids[i], Queue: "default", Payload: []byte(ids[i]), At: at}
		want[ids[i]] = at
	}
	if _, err := c.cli.EnqueueBatch(ctx, tasks); err != nil {
		t.Fatal(err)
	}

	var changed, active, gone, inTransit int
	// hist is every call's outcome, by id, printed for a task that ran
	// at an unexpected time.
	hist := map[string][]string{}
	note := func(id string, at time.Time, err error) {
		hist[id] = append(hist[id], fmt.Sprintf("%s: to %s: %v", time.Now().Format("15:04:05.000"), at.Format("15:04:05.000"), err))
	}
	reschedule := func(g, of int, stop time.Time) {
		// The far ones first: each is brought forward once at least.
		for i := g; i < n; i += of {
			if i%4 != 0 {
				continue
			}
			at := time.Now().Add(2*time.Second + time.Duration(rand.IntN(8000))*time.Millisecond).Truncate(time.Millisecond)
			_, err := c.cli.Reschedule(ctx, ids[i], at)
			for bo := (backoff.Backoff{}); errors.Is(err, shard.ErrTryAgain) && backoff.Sleep(ctx, bo.Next()); { // on its way to its new shard
				_, err = c.cli.Reschedule(ctx, ids[i], at)
			}
			mu.Lock()
			note(ids[i], at, err)
			mu.Unlock()
			if err != nil {
				t.Errorf("bring %s forward: %v", ids[i], err)
				continue
			}
			mu.Lock()
			want[ids[i]] = at
			changed++
			mu.Unlock()
		}
		// About 250 reschedules a second in all; 2,000 in make soak.
		every := 16 * time.Millisecond
		if n >= 10000 {
			every = 2 * time.Millisecond
		}
		pace := time.NewTicker(every)
		defer pace.Stop()
		for time.Now().Before(stop) {
			<-pace.C
			i := g + of*rand.IntN((n-g+of-1)/of)
			at := time.Now().Add(500*time.Millisecond + time.Duration(rand.IntN(7500))*time.Millisecond).Truncate(time.Millisecond)
			if rand.IntN(10) == 0 {
				at = at.Add(time.Hour) // an hour ahead: the change of the shard count moves it
			}
			_, err := c.cli.Reschedule(ctx, ids[i], at)
			mu.Lock()
			note(ids[i], at, err)
			switch {
			case err == nil:
				want[ids[i]] = at
				changed++
			case errors.Is(err, client.ErrActive):
				active++ // a worker has it: it runs at its last time
			case errors.Is(err, client.ErrNotFound):
				gone++ // it ran already
			case errors.Is(err, shard.ErrTryAgain):
				inTransit++ // on its way to its new shard: nothing changed
			default:
				t.Errorf("reschedule %s: %v", ids[i], err)
			}
			mu.Unlock()
		}
	}
	var wg sync.WaitGroup
	stop := time.Now().Add(4 * time.Second)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reschedule(g, 4, stop)
		}()
	}
	testenv.WaitFor(t, 10*time.Second, "40 tasks rescheduled an hour ahead", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		ahead := 0
		for _, at := range want {
			if time.Until(at) > 30*time.Minute {
				ahead++
			}
		}
		return ahead >= 40, fmt.Sprintf("%d", ahead)
	})
	_, _, moved := c.resize(t, ctx, 24, nil)
	wg.Wait()
	// Those left an hour ahead come back, so that every task runs.
	for id, at := range want {
		if time.Until(at) > 30*time.Minute {
			at = time.Now().Add(2 * time.Second).Truncate(time.Millisecond)
			_, err := c.cli.Reschedule(ctx, id, at)
			note(id, at, err)
			if err != nil {
				t.Fatalf("bring %s back: %v", id, err)
			}
			want[id] = at
		}
	}
	t.Logf("%d reschedules done, %d found a worker had the task, %d found it done, %d found it moving; %d tasks moved to their new shards", changed, active, gone, inTransit, moved)
	if moved == 0 {
		t.Error("the change of the shard count moved no task: the test did not race it")
	}

	testenv.WaitFor(t, 90*time.Second, "every task delivered", func() (bool, string) {
		tg.mu.Lock()
		defer tg.mu.Unlock()
		var missing []string
		for _, id := range ids {
			if tg.count[id] == 0 {
				missing = append(missing, id)
			}
		}
		sort.Strings(missing)
		return len(missing) == 0, fmt.Sprintf("%d missing, e.g. %v", len(missing), missing[:min(5, len(missing))])
	})
	lost := leasesLost(t, ctx, workers...)
	tg.mu.Lock()
	defer tg.mu.Unlock()
	twice, retried, wrong, early := 0, 0, 0, 0
	for _, id := range ids {
		if tg.count[id] > 1 {
			twice++
		}
		if tg.attempt[id] > 1 && tg.due[id].After(want[id]) {
			// Its first attempt lost its lease before the request left
			// (Redis too slow to lease it within UnleasedGrace of its
			// pop): recovery retried it with backoff, at a later due time.
			retried++
			continue
		}
		if !tg.due[id].Equal(want[id]) {
			if wrong++; wrong <= 5 {
				t.Errorf("%s ran with due time %v, want %v (its last reschedule); its calls: %v", id, tg.due[id], want[id], hist[id])
			}
		}
		if tg.first[id].Before(want[id]) {
			early++
		}
	}
	if float64(twice) > lost {
		t.Errorf("%d tasks delivered twice, %v leases lost", twice, lost)
	}
	t.Logf("%d tasks first reached the target on a retry (their first attempt lost its lease on a starved machine)", retried)
	if wrong > 0 || early > 0 {
		t.Errorf("%d of %d tasks ran at a due time other than their last one, %d before it", wrong, n, early)
	}
}
