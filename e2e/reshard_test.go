package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// batchProducer enqueues rate tasks a second, in batches every 50 ms (ids
// prefix0, prefix1, …, delays up to maxDelay), through enqueue, and keeps
// the producer's books; settle sends unknown outcomes again through cli.
func batchProducer(t *testing.T, cli *client.Client, prefix string, rate int, maxDelay time.Duration,
	enqueue func(context.Context, []client.Task) ([]client.Result, error)) *producer {
	p, ctx := newProducer(t, cli, prefix)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		per := max(1, rate/20)
		for i := 0; ; {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			tasks := make([]client.Task, per)
			now := time.Now()
			p.mu.Lock()
			for k := range tasks {
				id := fmt.Sprintf("%s%d", prefix, i)
				i++
				delay := time.Duration(rand.Int64N(int64(maxDelay/time.Millisecond)+1)) * time.Millisecond
				tasks[k] = client.Task{ID: id, Queue: "default", Payload: []byte(id), Delay: delay}
				p.sent[id], p.notBefore[id] = now, now.Add(delay).Truncate(time.Millisecond)
			}
			p.mu.Unlock()
			// Not under ctx: Stop lets a batch in flight finish, so
			// that every outcome is known (settle would send a lost one
			// again without its delay).
			cctx, cancel := context.WithTimeout(context.Background(), enqueueBudget)
			rs, _ := enqueue(cctx, tasks)
			cancel()
			for k, r := range rs {
				p.record(tasks[k].ID, r.Err)
			}
		}
	}()
	return p
}

// staleEnqueue enqueues through a store made for every call with the
// layout before any change (16 shards, generation 0): a producer that
// never reads the layout record, and relies on the enqueue script's
// redirect each time.
func (c *cluster) staleEnqueue(ctx context.Context, tasks []client.Task) ([]client.Result, error) {
	l, _ := shard.NewLayout("hourglass", nShards)
	st := shard.NewStore(c.rdb, l)
	as := make([]shard.EnqueueArgs, len(tasks))
	for i, t := range tasks {
		as[i] = shard.EnqueueArgs{ID: t.ID, Queue: t.Queue, Payload: t.Payload, Delay: t.Delay, MaxRetries: -1}
	}
	out := make([]client.Result, len(tasks))
	for i, r := range st.EnqueueBatch(ctx, as) {
		out[i] = client.Result{ID: tasks[i].ID, Due: r.Due, Err: r.Err}
	}
	return out, nil
}

// resize starts a change of the shard count to n and waits until the
// layout record is stable again; it returns when the change started and
// ended (by the record).
func (c *cluster) resize(t *testing.T, ctx context.Context, n int, during func()) (started, ended time.Time, moved int64) {
	t.Helper()
	l, err := c.store.BeginResize(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	if during != nil {
		during()
	}
	var rec shard.LayoutRecord
	testenv.WaitFor(t, 90*time.Second, fmt.Sprintf("the change to %d shards ends", n), func() (bool, string) {
		rec, err = c.store.ReadLayout(ctx)
		if err != nil {
			return false, err.Error()
		}
		return rec.Gen == l.Gen() && rec.State == shard.LayoutStable, fmt.Sprintf("state %s, %d shards done, %d moved", rec.State, len(rec.Done), rec.Moved)
	})
	return rec.Started, rec.Finished, rec.Moved
}

// lateness returns the p50 and p99 of receive - due of the acknowledged
// ids of ps whose due time is in [from, to).
func lateness(tg *target, from, to time.Time, ps ...*producer) (p50, p99 time.Duration, n int) {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	var ds []time.Duration
	for _, p := range ps {
		p.mu.Lock()
		for id := range p.acked {
			due, ok := tg.due[id]
			if ok && !due.Before(from) && due.Before(to) {
				ds = append(ds, tg.first[id].Sub(due))
			}
		}
		p.mu.Unlock()
	}
	return percentile(ds, 0.5), percentile(ds, 0.99), len(ds)
}

// TestSoakReshardGrowAndShrinkUnderLoad is the long form of
// TestReshardGrowAndShrinkUnderLoad: 1,000 tasks/s, delays up to 10 s and
// 6,000 far tasks.
func TestSoakReshardGrowAndShrinkUnderLoad(t *testing.T) {
	testenv.SkipUnlessSoak(t)
	testenv.Parallel(t)
	testReshard(t, reshardLoad{rate: 1000, maxDelay: 10 * time.Second, backlog: 6000})
}

// TestSoakReshardOnRedisCluster: TestReshardGrowAndShrinkUnderLoad on a
// Redis Cluster of three primaries, where every step of a change of the
// shard count is a call on one slot: 300 tasks/s, delays up to 10 s and
// 1,500 far tasks. It runs in make soak (CI's step after make test) only:
// make test changes the shard count on a Redis Cluster under load in
// TestClusterFlowAndLiveReshard.
func TestSoakReshardOnRedisCluster(t *testing.T) {
	testenv.SkipUnlessSoak(t)
	testenv.Parallel(t)
	testReshard(t, reshardLoad{rate: 300, maxDelay: 10 * time.Second, backlog: 1500}, withRedisCluster())
}

// reshardLoad is the load a reshard test runs its changes under: rate
// tasks/s (4/5 from an up-to-date producer, 1/5 from a stale one) with
// delays up to maxDelay, and backlog tasks hours ahead.
type reshardLoad struct {
	rate     int
	maxDelay time.Duration
	backlog  int
}

// testReshard runs the changes under load.
func testReshard(t *testing.T, load reshardLoad, opts ...clusterOption) {
	c := newCluster(t, opts...)
	tg := newTarget(t)
	tg.setBehave(func(w http.ResponseWriter, _ *http.Request, id string, _ int) bool {
		if strings.HasPrefix(id, "dead-") {
			w.WriteHeader(http.StatusInternalServerError)
			return true
		}
		return false
	})
	args := workerArgs(tg.URL, 30*time.Second, 128)
	// Periodic schedules every second, whose homes move with the changes.
	sargs := slices.Clone(args)
	var ticks []string
	for i := range 6 {
		name := fmt.Sprintf("tick-%d", i)
		ticks = append(ticks, name)
		sargs = append(sargs, periodicArgs(name, "queue", "default", "interval", "1s", "catch_up", "all", "catch_up_window", "1m")...)
	}
	// A slow reshard, so that the SIGKILL below lands in the middle of
	// one.
	args = append(sargs, "-set", "scheduler.reshard_rate=1000")
	scheds := []*sched{c.start("s-1", args...), c.start("s-2", args...), c.start("s-3", args...)}
	testenv.WaitFor(t, 20*time.Second, "3 replicas own the 16 shards", func() (bool, string) { return c.settled("s-1", "s-2", "s-3") })
	workers := []*sched{c.startWorker("w-1", args...), c.startWorker("w-2", args...)}
	ctx := testenv.Ctx(t, 5*time.Minute)

	// Before: tasks hours ahead (the far tier), dead letters, and ids to
	// check dedupe, cancel and lookup on.
	var far, dead []client.Task
	later := func(prefix string, n int) []client.Task {
		var ts []client.Task
		for i := range n {
			ts = append(ts, client.Task{ID: fmt.Sprintf("%s%d", prefix, i), Queue: "default", Payload: []byte(prefix),
				At: time.Now().Add(2*time.Hour + time.Duration(i)*time.Second)})
		}
		if _, err := c.cli.EnqueueBatch(ctx, ts); err != nil {
			t.Fatal(err)
		}
		return ts
	}
	far = later("far-", load.backlog)
	for i := range 40 {
		dead = append(dead, client.Task{ID: fmt.Sprintf("dead-%d", i), Queue: "default", MaxRetries: client.Retries(0)})
	}
	if _, err := c.cli.EnqueueBatch(ctx, dead); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "40 dead letters", func() (bool, string) {
		n := 0
		for _, d := range dead {
			if in, err := c.cli.Lookup(ctx, d.ID); err == nil && in.State == client.StateDead {
				n++
			}
		}
		return n == len(dead), fmt.Sprintf("%d dead", n)
	})

	fresh := batchProducer(t, c.cli, "p-", load.rate*4/5, load.maxDelay, c.cli.EnqueueBatch)
	stale := batchProducer(t, c.cli, "old-", load.rate/5, load.maxDelay, c.staleEnqueue)
	time.Sleep(2 * time.Second) // a baseline of lateness before the change (load, not a wait for a condition)

	// Dedupe and lookup of tasks enqueued before the changes, during
	// the grow (mid) and after the shrink (post), whenever they are
	// checked.
	var mid, post []client.Task
	checkIDs := func(when string) {
		t.Helper()
		var ts []client.Task
		for _, set := range [][]client.Task{far, mid, post} {
			ts = append(ts, set[:min(len(set), 30)]...)
		}
		// Dedupe: enqueued again, each is a duplicate.
		for _, f := range ts {
			if _, err := c.cli.Enqueue(ctx, f); !errors.Is(err, client.ErrDuplicate) {
				t.Errorf("%s: enqueue %s again: %v, want ErrDuplicate", when, f.ID, err)
			}
		}
		// Lookup: each is scheduled at its due time.
		for _, f := range ts {
			in, err := c.cli.Lookup(ctx, f.ID)
			if err != nil || in.State != client.StateScheduled || !in.Due.Equal(f.At.Truncate(time.Millisecond)) {
				t.Errorf("%s: lookup %s: %+v, %v; want scheduled at %s", when, f.ID, in, err, f.At)
			}
		}
	}
	cancelled := map[string]bool{}
	cancel := func(when string, ids []client.Task) {
		t.Helper()
		for _, f := range ids {
			if _, err := c.cli.Cancel(ctx, f.ID); err != nil {
				t.Errorf("%s: cancel %s: %v", when, f.ID, err)
			}
			cancelled[f.ID] = true
		}
	}
	checkIDs("before")
	cancel("before", far[40:50])

	// Grow 16 -> 32.
	growStart, growEnd, grown := c.resize(t, ctx, 32, func() {
		mid = later("mid-", 60)
		checkIDs("during the grow")
		cancel("during the grow", far[50:60])
	})
	checkIDs("after the grow")
	time.Sleep(time.Second) // load between the changes (not a wait for a condition)

	var killedShards []int
	// Shrink 32 -> 8, with a scheduler SIGKILLed once tasks are moving;
	// it comes back as s-4, and the killed replica's shards are resharded
	// by their new owners.
	shrinkStart, shrinkEnd, shrunk := c.resize(t, ctx, 8, func() {
		testenv.WaitFor(t, 30*time.Second, "the shrink moving tasks", func() (bool, string) {
			rec, err := c.store.ReadLayout(ctx)
			return err == nil && rec.Moved >= 300, fmt.Sprintf("%+v %v", rec, err)
		})
		killedShards = c.shardsOf("s-1")
		scheds[0].Kill()
		scheds = append(scheds, c.start("s-4", args...))
		checkIDs("during the shrink")
		cancel("during the shrink", far[60:70])
		cancel("during the shrink", mid[40:50])
	})
	post = later("post-", 60)
	checkIDs("after the shrink")
	cancel("after the shrink", far[70:80])
	cancel("after the shrink", post[40:50])
	time.Sleep(time.Second) // load after the changes (not a wait for a condition)
	fresh.Stop()
	stale.Stop()
	fresh.settle(t, ctx)
	stale.settle(t, ctx)

	testenv.WaitFor(t, 2*time.Minute, "every acknowledged task delivered", func() (bool, string) {
		m := append(fresh.missing(tg), stale.missing(tg)...)
		sort.Strings(m)
		return len(m) == 0, fmt.Sprintf("%d missing, e.g. %v", len(m), m[:min(5, len(m))])
	})
	// None twice, but for deliveries whose lease was lost.
	lost := leasesLost(t, ctx, workers...)
	if d := fresh.duplicates(tg) + stale.duplicates(tg); float64(d) > lost {
		t.Errorf("%d tasks delivered twice, %v leases lost", d, lost)
	}
	for _, p := range []*producer{fresh, stale} {
		if n, worst := p.early(tg); n > 0 {
			t.Errorf("producer %s: %d tasks delivered early, worst by %s", p.prefix, n, worst)
		}
	}

	// The far tasks and dead letters are in their shard of 8, as they
	// were; the cancelled ones are gone for good.
	l := c.store.Layout()
	if _, err := c.store.RefreshLayout(ctx); err != nil {
		t.Fatal(err)
	}
	if l = c.store.Layout(); l.Shards() != 8 || l.Resharding() || l.Gen() != 2 {
		t.Fatalf("layout after the changes: generation %d, %d shards, from %d", l.Gen(), l.Shards(), l.From())
	}
	for _, f := range slices.Concat(far, mid, post) {
		in, err := c.cli.Lookup(ctx, f.ID)
		switch {
		case cancelled[f.ID]:
			if !errors.Is(err, client.ErrNotFound) {
				t.Errorf("cancelled %s: %+v, %v", f.ID, in, err)
			}
		case err != nil || in.State != client.StateScheduled || !in.Due.Equal(f.At.Truncate(time.Millisecond)):
			t.Errorf("far task %s after the changes: %+v, %v", f.ID, in, err)
		case !c.rdb.HExists(ctx, l.Tasks(testenv.ShardOf(f.ID, 8)), f.ID).Val():
			t.Errorf("far task %s is not in shard %d", f.ID, testenv.ShardOf(f.ID, 8))
		}
	}
	for _, d := range dead {
		if in, err := c.cli.Lookup(ctx, d.ID); err != nil || in.State != client.StateDead || in.Dead == nil || in.Dead.Reason == "" {
			t.Errorf("dead letter %s after the changes: %+v, %v", d.ID, in, err)
		}
	}
	// The dropped shards are gone (their layout markers stay), and every
	// task left is in its shard.
	for sh := 8; sh < 32; sh++ {
		for _, k := range []string{l.Tasks(sh), l.Delayed(sh), l.Dead(sh), l.Far(sh), l.Outbox(sh), l.Queues(sh), l.Counts(sh)} {
			if c.rdb.Exists(ctx, k).Val() != 0 {
				t.Errorf("dropped shard %d still has %s", sh, k)
			}
		}
	}
	for sh := range 8 {
		for _, id := range c.rdb.HKeys(ctx, l.Tasks(sh)).Val() {
			if testenv.ShardOf(id, 8) != sh {
				t.Errorf("task %s in shard %d, belongs in %d", id, sh, testenv.ShardOf(id, 8))
			}
		}
	}

	// Every occurrence of every schedule once, across both changes: wait
	// until each has delivered one fired after the load ended and none is
	// missing before it (the checks below name what is missing if not).
	loadEnd := time.Now().UnixMilli()
	waitQuietly(20*time.Second, func() bool {
		for _, name := range ticks {
			ks := sortedKeys(tg.occurrences(name))
			if len(ks) == 0 || ks[len(ks)-1] <= loadEnd || len(ks) != int((ks[len(ks)-1]-ks[0])/1000)+1 {
				return false
			}
		}
		return true
	})
	occurrences, doubled, missing := 0, 0, 0
	for _, name := range ticks {
		occ := tg.occurrences(name)
		ks := sortedKeys(occ)
		if len(ks) < 10 {
			t.Errorf("schedule %s: %d occurrences delivered", name, len(ks))
			continue
		}
		for _, ms := range ks {
			if len(occ[ms]) > 1 {
				doubled++
				t.Errorf("schedule %s: occurrence %d delivered as %d tasks: %v", name, ms, len(occ[ms]), occ[ms])
			}
		}
		for ms := ks[0]; ms <= ks[len(ks)-1]; ms += 1000 {
			if _, ok := occ[ms]; !ok {
				missing++
				t.Errorf("schedule %s: occurrence %d never delivered", name, ms)
			}
		}
		occurrences += len(ks)
	}
	t.Logf("%d periodic schedules, %d occurrences across both changes: %d delivered twice, %d missing", len(ticks), occurrences, doubled, missing)

	resumed, takenOver := 0, 0
	for _, s := range scheds {
		b, err := os.ReadFile(s.LogPath())
		if err != nil {
			continue
		}
		resumed += strings.Count(string(b), "resuming a batch left in the outbox")
		if s != scheds[0] {
			for _, sh := range killedShards {
				re := regexp.MustCompile(fmt.Sprintf(`shard done: nothing left to move: .*\bshard=%d\b.* generation=2`, sh))
				if re.Match(b) {
					takenOver++
				}
			}
		}
	}
	before50, before99, nb := lateness(tg, growStart.Add(-2*time.Second), growStart, fresh, stale)
	grow50, grow99, ng := lateness(tg, growStart, growEnd.Add(time.Second), fresh, stale)
	shrink50, shrink99, ns := lateness(tg, shrinkStart, shrinkEnd.Add(time.Second), fresh, stale)
	t.Logf("grow 16->32: %d tasks moved in %s (%.0f tasks/s); shrink 32->8 with a scheduler SIGKILLed: %d moved in %s (%.0f tasks/s), %d outbox batches resumed by a new owner",
		grown, growEnd.Sub(growStart), float64(grown)/growEnd.Sub(growStart).Seconds(),
		shrunk, shrinkEnd.Sub(shrinkStart), float64(shrunk)/shrinkEnd.Sub(shrinkStart).Seconds(), resumed)
	t.Logf("the SIGKILLed replica owned shards %v; %d of them were resharded by the replicas that took them over", killedShards, takenOver)
	t.Logf("lateness receive-due p50/p99: before %s/%s (%d tasks), during the grow %s/%s (%d), during the shrink %s/%s (%d); %d + %d acknowledged tasks delivered, 0 lost, 0 early, %d twice after %v leases lost (race-enabled binaries; no bar asserted)",
		before50, before99, nb, grow50, grow99, ng, shrink50, shrink99, ns, fresh.count(), stale.count(), fresh.duplicates(tg)+stale.duplicates(tg), lost)
}
