package worker

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hourglass-sched/hourglass/internal/shard"
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

// placeByKey switches e's deployment to placement by key (nothing is
// stored yet, so the change has nothing to move) and waits until it is
// stable.
func placeByKey(t *testing.T, e *env) {
	t.Helper()
	ctx := testenv.Ctx(t, 10*time.Second)
	l, err := e.Store.BeginChange(ctx, shards, shard.PlaceByKey)
	if err != nil {
		t.Fatal(err)
	}
	for sh := range l.Existing() {
		if _, err := e.Store.ShardDone(ctx, l, sh); err != nil {
			t.Fatal(err)
		}
	}
	if l := e.Layout(); l.Resharding() || l.Placement() != shard.PlaceByKey {
		t.Fatalf("layout after the change: resharding %v, placement %s", l.Resharding(), l.Placement())
	}
}

// TestKeyConcurrencyHeldBeforeTheTake: a fair queue with a cap of 3 per
// key, placed by key, a worker with 16 slots: the hot key never runs more
// than 3 at once (and reaches 3) while the other key's tasks run beside
// it; a raised cap at run time lets the hot key run more at once; every
// task runs once.
func TestKeyConcurrencyHeldBeforeTheTake(t *testing.T) {
	t.Parallel()
	p := shardtest.Policy()
	p.FairWindow, p.KeyConcurrency = 8, 3
	e := newEnv(t, p)
	placeByKey(t, e)
	ctx := testenv.Ctx(t, time.Minute)
	var hot, cool []string
	for i := range 60 {
		hot = append(hot, fmt.Sprintf("{hot}%03d", i))
	}
	for i := range 12 {
		cool = append(cool, fmt.Sprintf("{cool}%03d", i))
	}
	e.Schedule("q", 0, hot...)
	e.Schedule("q", 0, cool...)

	var mu sync.Mutex
	running, most, runs := map[string]int{}, map[string]int{}, map[string]int{}
	raised := false
	// The hot key's most at once before and after its cap was raised.
	mostBefore, mostAfter := 0, 0
	h := func(ctx context.Context, task *Task) error {
		k := shard.KeyOf(task.ID)
		mu.Lock()
		running[k]++
		runs[task.ID]++
		most[k] = max(most[k], running[k])
		switch {
		case k != "hot":
		case raised:
			mostAfter = max(mostAfter, running[k])
		default:
			mostBefore = max(mostBefore, running[k])
		}
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		running[k]--
		mu.Unlock()
		return nil
	}
	e.start(e.RDB, QueueOptions{Concurrency: 16}, h)
	testenv.WaitFor(t, 30*time.Second, "20 of the hot key's tasks run", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for id := range runs {
			if strings.HasPrefix(id, "{hot}") {
				n++
			}
		}
		return n >= 20, fmt.Sprint(n)
	})
	mu.Lock()
	raised = true
	mu.Unlock()
	if err := e.Store.SetKeyConcurrency(ctx, "q", "hot", 8); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "every task run", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(runs) == len(hot)+len(cool), fmt.Sprint(len(runs))
	})
	mu.Lock()
	defer mu.Unlock()
	for id, n := range runs {
		if n != 1 {
			t.Errorf("%s ran %d times", id, n)
		}
	}
	t.Logf("most at once: %v; the hot key before its cap was raised: %d, after (to 8): %d", most, mostBefore, mostAfter)
	if mostBefore != 3 {
		t.Errorf("the hot key ran at most %d at once under its cap of 3, want 3", mostBefore)
	}
	if most["cool"] < 2 {
		t.Errorf("the cool key ran at most %d at once beside the hot one", most["cool"])
	}
	if mostAfter <= 3 {
		t.Errorf("after the cap was raised to 8 the hot key ran at most %d at once", mostAfter)
	}
	if most["hot"] > 8 {
		t.Errorf("the hot key ran %d at once, cap 8", most["hot"])
	}
}

// TestOverlappingPopsShareRefills: pops of a fair queue whose refills
// overlap share them: ten asked for while the first is held up in Redis
// (CLIENT PAUSE) cost two refill calls, not ten.
func TestOverlappingPopsShareRefills(t *testing.T) {
	t.Parallel()
	r := testenv.StartRedis(t)
	rdb := r.Client(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	w, err := New(rdb, Config{Namespace: ns, Shards: shards, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Handle("q", func(context.Context, *Task) error { return nil }, QueueOptions{Concurrency: 1}); err != nil {
		t.Fatal(err)
	}
	q := w.queue("q")
	run := &runState{hctx: ctx, active: map[*delivery]struct{}{}}
	calls := func() int64 {
		t.Helper()
		info := rdb.Info(ctx, "commandstats").Val()
		for _, line := range strings.Split(info, "\n") {
			if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls="); ok {
				n, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
				return n
			}
		}
		return 0
	}
	// The first call loads the script (EVALSHA, then EVAL): once beforehand.
	w.refillAsync(ctx, q, 0, run)
	run.claims.Wait()
	before := calls()
	if err := rdb.Do(ctx, "CLIENT", "PAUSE", "300", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		w.refillAsync(ctx, q, 0, run)
	}
	run.claims.Wait()
	if n := calls() - before; n != 2 {
		t.Fatalf("10 overlapping refills cost %d calls, want 2 (the one in flight and one after it)", n)
	}
}

// TestKeyRateHeldBeforeTheTake: a fair queue with a rate of 20 per second
// per key (bursts of 1): one key's 8 tasks enter the window no faster
// than that, so the last starts at least 7/20 s after they were enqueued
// and the key's bucket took 8 tokens; the scheduler's mover lets each
// next one in when its token comes, and every task runs once. (Starts
// are not spaced when the worker falls behind: the tokens are taken when
// the tasks enter the window, docs/fairness.md.)
func TestKeyRateHeldBeforeTheTake(t *testing.T) {
	t.Parallel()
	p := shardtest.Policy()
	p.FairWindow, p.KeyRate = 8, shard.KeyRate{Rate: 20, Period: time.Second, Burst: 1}
	e := newEnv(t, p)
	placeByKey(t, e)
	var ids []string
	for i := range 8 {
		ids = append(ids, fmt.Sprintf("{p}%d", i))
	}
	ctx := testenv.Ctx(t, time.Minute)
	t0 := e.RDB.Time(ctx).Val()
	e.Schedule("q", 0, ids...)
	var mu sync.Mutex
	starts := map[string]time.Time{}
	runs := 0
	l := e.Layout()
	bucket := l.FairBucket(l.ShardOf(ids[0]), "q", "p")
	var tat int64 // the bucket's theoretical arrival time when the last task started
	var tatErr error
	e.start(e.RDB, QueueOptions{Concurrency: 8}, func(ctx context.Context, task *Task) error {
		mu.Lock()
		defer mu.Unlock()
		if _, ok := starts[task.ID]; !ok {
			starts[task.ID] = time.Now()
			if len(starts) == len(ids) {
				tat, tatErr = e.RDB.Get(ctx, bucket).Int64()
			}
		}
		runs++
		return nil
	})
	testenv.WaitFor(t, 30*time.Second, "every task run", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(starts) == len(ids), fmt.Sprint(len(starts))
	})
	mu.Lock()
	defer mu.Unlock()
	first, last := time.Time{}, time.Time{}
	for _, at := range starts {
		if first.IsZero() || at.Before(first) {
			first = at
		}
		if at.After(last) {
			last = at
		}
	}
	t.Logf("8 tasks of one key at 20/s started over %v, the last %v after the enqueue", last.Sub(first), last.Sub(t0))
	if runs != len(ids) {
		t.Errorf("%d runs of %d tasks", runs, len(ids))
	}
	// 7 intervals of 50 ms between the first admission and the last;
	// Redis's clock and ours are the machine's.
	if d := last.Sub(t0); d < 340*time.Millisecond {
		t.Errorf("8 tasks of one key at 20/s all started within %v of their enqueue", d)
	}
	// The bucket's theoretical arrival time: 8 tokens of 50 ms taken
	// from the first admission on, which was after t0.
	if tatErr != nil || tat < t0.UnixMicro()+8*50000-1000 {
		t.Errorf("the key's bucket after 8 tasks: %d, %v; want at least %d", tat, tatErr, t0.UnixMicro()+8*50000)
	}
}
