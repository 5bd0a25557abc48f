package e2e_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/internal/promread"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestMain runs up to four of these tests at once unless -parallel says
// otherwise (go test's default is one per CPU, two on the CI machine):
// they spend most of their time waiting on child processes, lease
// expiries and timed fault phases, not computing. They start in the
// order they are declared (testenv.Parallel), the longest first.
func TestMain(m *testing.M) {
	testenv.OrderParallel(4)
	testenv.Main(m)
}

// TestOwnershipFailover: three replicas split 16 shards 5/6 each; a
// SIGKILLed replica's shards are taken over after the lease TTL, a
// SIGTERMed replica's at once; a restarted replica gets its share back.
func TestOwnershipFailover(t *testing.T) {
	testenv.Parallel(t)
	c := newCluster(t)
	a, b, d := c.start("r-a"), c.start("r-b"), c.start("r-c")
	_ = b
	testenv.WaitFor(t, 20*time.Second, "3 replicas own 5 or 6 shards each", func() (bool, string) {
		return c.settled("r-a", "r-b", "r-c")
	})

	// SIGKILL: the lease must expire first.
	killed := c.shardsOf("r-a")
	start := time.Now()
	a.Kill()
	testenv.WaitFor(t, 10*(ttl+time.Second), "SIGKILLed replica's shards taken over", func() (bool, string) {
		return c.takenOver("r-a", killed)
	})
	killTakeover := time.Since(start)
	t.Logf("SIGKILL take-over of %d shards: %s (lease TTL %s, bar TTL+1s)", len(killed), killTakeover, ttl)
	testenv.WaitFor(t, 10*time.Second, "2 replicas own 8 each", func() (bool, string) { return c.settled("r-b", "r-c") })

	// Restart: rebalances back to 5/6.
	a2 := c.start("r-a")
	testenv.WaitFor(t, 20*time.Second, "restarted replica gets its share", func() (bool, string) {
		return c.settled("r-a", "r-b", "r-c")
	})
	_ = a2

	// SIGTERM: the replica resigns, others take over without waiting.
	termed := c.shardsOf("r-c")
	start = time.Now()
	if err := d.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*(ttl+time.Second), "SIGTERMed replica's shards taken over", func() (bool, string) {
		return c.takenOver("r-c", termed)
	})
	termTakeover := time.Since(start)
	t.Logf("SIGTERM hand-over of %d shards: %s (bar 200ms)", len(termed), termTakeover)
	if err := d.Wait(10 * time.Second); err != nil {
		t.Fatalf("SIGTERMed scheduler exited with %v, want status 0", err)
	}
	if termTakeover >= ttl {
		t.Fatalf("SIGTERM hand-over took %s, as long as a lease expiry: the replica did not resign", termTakeover)
	}
	testenv.WaitFor(t, 10*time.Second, "2 replicas own 8 each", func() (bool, string) { return c.settled("r-a", "r-b") })
}

// readyIDs returns every id in every ready list, with repeats.
func (c *cluster) readyIDs(t *testing.T) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	for sh := 0; sh < nShards; sh++ {
		keys, err := c.rdb.Keys(ctx, c.store.Layout().ReadyPrefix(sh)+"*").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			for _, e := range c.rdb.LRange(ctx, k, 0, -1).Val() {
				_, id, _ := strings.Cut(shard.EntryRef(e), "|") // entries are "seq|id|task"
				out = append(out, id)
			}
		}
	}
	return out
}

// checkOnce fails unless ids holds every want id exactly once.
func checkOnce(t *testing.T, ids []string, want map[string]bool) {
	t.Helper()
	seen := map[string]int{}
	for _, id := range ids {
		seen[id]++
		if seen[id] == 2 {
			t.Errorf("task %s is in a ready list twice", id)
		}
	}
	for id := range want {
		if seen[id] == 0 {
			t.Errorf("task %s never reached a ready list", id)
		}
	}
	if len(seen) != len(want) {
		t.Errorf("%d distinct ids in ready lists, want %d", len(seen), len(want))
	}
}

// TestEtcdPauseFencesMovers: with etcd stopped (SIGSTOP) past the lease
// TTL, every scheduler stops moving before any other owner can start;
// after SIGCONT ownership returns with newer epochs and no task is moved
// twice.
func TestEtcdPauseFencesMovers(t *testing.T) {
	testenv.Parallel(t)
	c := newCluster(t)
	s1, s2 := c.start("p-1"), c.start("p-2")
	testenv.WaitFor(t, 20*time.Second, "2 replicas own 8 each", func() (bool, string) { return c.settled("p-1", "p-2") })
	_, before := c.owners()

	// A steady producer of tasks due at once, across all shards.
	ctx, stopProducer := context.WithCancel(context.Background())
	defer stopProducer()
	var (
		mu   sync.Mutex
		sent = map[string]bool{}
		wg   sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			id := fmt.Sprintf("p%d", i)
			if _, err := c.cli.Enqueue(ctx, client.Task{ID: id, Queue: "default"}); err == nil {
				mu.Lock()
				sent[id] = true
				mu.Unlock()
			}
			time.Sleep(2 * time.Millisecond) // pacing the load, not waiting for a result
		}
	}()

	c.etcd.Pause()
	paused := time.Now()
	for _, s := range []*sched{s1, s2} {
		testenv.WaitFor(t, ttl+3*time.Second, s.id+" stops owning shards while etcd is paused", func() (bool, string) {
			st, err := s.status()
			return err == nil && len(st.Shards) == 0, fmt.Sprintf("%+v %v", st, err)
		})
	}
	t.Logf("both schedulers stopped moving %s after etcd was paused (lease TTL %s)", time.Since(paused), ttl)
	// Movers stopped: tasks due now stay in their delayed sets.
	marker := "marker-after-fence"
	if _, err := c.cli.Enqueue(context.Background(), client.Task{ID: marker, Queue: "default"}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	sent[marker] = true
	mu.Unlock()
	holdUntil := paused.Add(ttl + time.Second)
	for time.Now().Before(holdUntil) { // keep etcd stopped past the TTL
		info, err := c.cli.Lookup(context.Background(), marker)
		if err != nil || info.State != client.StateScheduled {
			t.Fatalf("a fenced scheduler moved %s: %+v %v", marker, info, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.etcd.Resume()

	testenv.WaitFor(t, 30*time.Second, "ownership back after SIGCONT", func() (bool, string) { return c.settled("p-1", "p-2") })
	_, after := c.owners()
	for sh, e := range after {
		if e <= before[sh] {
			t.Errorf("shard %d: epoch %d after the pause, not newer than %d", sh, e, before[sh])
		}
	}
	stopProducer()
	wg.Wait()
	testenv.WaitFor(t, 20*time.Second, "every task moved", func() (bool, string) {
		n := len(c.readyIDs(t))
		return n >= len(sent), fmt.Sprintf("%d of %d in ready lists", n, len(sent))
	})
	checkOnce(t, c.readyIDs(t), sent)
	t.Logf("%d tasks, each moved exactly once across the pause", len(sent))
}

// TestEveryTaskMovedOnce: 5,000 tasks with random delays of 0-3 s reach
// their ready lists exactly once; the move-time lateness is printed.
// TestSoakEveryTaskMovedOnce moves 20,000.
func TestEveryTaskMovedOnce(t *testing.T) {
	testenv.Parallel(t)
	testEveryTaskMovedOnce(t, 5000)
}

// TestSoakEveryTaskMovedOnce is the long form of TestEveryTaskMovedOnce:
// 20,000 tasks.
func TestSoakEveryTaskMovedOnce(t *testing.T) {
	testenv.SkipUnlessSoak(t)
	testenv.Parallel(t)
	testEveryTaskMovedOnce(t, 20000)
}

func testEveryTaskMovedOnce(t *testing.T, n int) {
	c := newCluster(t)
	s1, s2 := c.start("m-1"), c.start("m-2")
	testenv.WaitFor(t, 20*time.Second, "2 replicas own 8 each", func() (bool, string) { return c.settled("m-1", "m-2") })
	ctx := testenv.Ctx(t, 2*time.Minute)
	want := map[string]bool{}
	var batch []client.Task
	for i := 0; i < n; i++ {
		id := "t" + strconv.Itoa(i)
		want[id] = true
		batch = append(batch, client.Task{ID: id, Queue: "default", Delay: time.Duration(rand.IntN(3000)) * time.Millisecond})
		if len(batch) == 500 {
			if _, err := c.cli.EnqueueBatch(ctx, batch); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	testenv.WaitFor(t, 60*time.Second, "every task in a ready list", func() (bool, string) {
		moved := 0
		for sh := 0; sh < nShards; sh++ {
			moved += int(c.rdb.LLen(ctx, c.store.Layout().Ready(sh, "default")).Val())
		}
		return moved >= n, fmt.Sprintf("%d moved", moved)
	})
	checkOnce(t, c.readyIDs(t), want)
	h, err := promread.Scrape(ctx, "hourglass_move_lateness_seconds", "http://"+s1.http+"/metrics", "http://"+s2.http+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if h.Count < uint64(n) {
		t.Fatalf("lateness histogram counted %d moves, want >= %d", h.Count, n)
	}
	t.Logf("move-time lateness over %d tasks: p50 %.1fms p99 %.1fms (Redis TIME at move - due; no bar asserted)",
		h.Count, 1000*h.Quantile(0.50), 1000*h.Quantile(0.99))
}

// TestFarTierThroughScheduler: with a 1 s far tier, tasks due 3-4 s ahead
// are stored in bucket lists, not the delayed set; the scheduler promotes
// them and moves each exactly once, and the tier ends empty.
func TestFarTierThroughScheduler(t *testing.T) {
	testenv.Parallel(t)
	c := newCluster(t)
	s := c.start("far-1", "-set", "scheduler.far_bucket=1s", "-set", "scheduler.far_lead=1s")
	testenv.WaitFor(t, 20*time.Second, "one replica owns all 16 shards", func() (bool, string) { return c.settled("far-1") })
	ctx := testenv.Ctx(t, time.Minute)
	l := c.store.Layout()
	testenv.WaitFor(t, 10*time.Second, "far tier registered", func() (bool, string) {
		v, err := c.rdb.HGet(ctx, l.Queues(0), "|far").Result()
		return v == "1000|1000", fmt.Sprintf("%q %v", v, err)
	})
	farEntries := func() (n int64) {
		for sh := 0; sh < nShards; sh++ {
			for _, b := range c.rdb.ZRange(ctx, l.Far(sh), 0, -1).Val() {
				n += c.rdb.LLen(ctx, l.FarBucket(sh, b)).Val()
			}
		}
		return n
	}
	want := map[string]bool{}
	var batch []client.Task
	for i := 0; i < 500; i++ {
		id := "far" + strconv.Itoa(i)
		want[id] = true
		batch = append(batch, client.Task{ID: id, Queue: "default", Delay: 3*time.Second + time.Duration(rand.IntN(1000))*time.Millisecond})
	}
	if _, err := c.cli.EnqueueBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if n := farEntries(); n != 500 {
		t.Fatalf("far tier holds %d entries right after the enqueue, want 500", n)
	}
	testenv.WaitFor(t, 20*time.Second, "500 tasks in ready lists", func() (bool, string) {
		n := 0
		for sh := 0; sh < nShards; sh++ {
			n += int(c.rdb.LLen(ctx, l.Ready(sh, "default")).Val())
		}
		return n >= 500, fmt.Sprintf("%d moved", n)
	})
	checkOnce(t, c.readyIDs(t), want)
	for sh := 0; sh < nShards; sh++ {
		if n := c.rdb.Exists(ctx, l.Far(sh)).Val() + c.rdb.ZCard(ctx, l.Delayed(sh)).Val(); n != 0 {
			t.Fatalf("shard %d: far tier or delayed set not empty after the moves", sh)
		}
	}
	h, err := promread.Scrape(ctx, "hourglass_move_lateness_seconds", "http://"+s.http+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("far-tier tasks: move-time lateness p50 %.1fms p99 %.1fms over %d moves (no bar asserted)", 1000*h.Quantile(0.5), 1000*h.Quantile(0.99), h.Count)
}

// commandCalls reads INFO commandstats: calls per command.
func (c *cluster) commandCalls(t *testing.T) map[string]int64 {
	t.Helper()
	return testenv.CommandCalls(t, c.rdb)
}

// TestIdleCostsAlmostNothing: an idle scheduler owning 16 shards sends
// Redis only a handful of commands per second.
func TestIdleCostsAlmostNothing(t *testing.T) {
	testenv.Parallel(t)
	c := newCluster(t)
	// Future tasks stored before the scheduler starts, so no wake-up is in
	// flight when the window opens: the owner's first scan finds them and
	// sleeps until the safety re-check (30 s), beyond the window.
	if err := c.store.RegisterQueues(context.Background(), map[string]shard.QueuePolicy{"default": {MaxRetries: 1, Timeout: time.Second, MaxPayload: 1024}}); err != nil {
		t.Fatal(err)
	}
	var batch []client.Task
	for i := 0; i < 1000; i++ {
		batch = append(batch, client.Task{Queue: "default", Delay: time.Hour})
	}
	if _, err := c.cli.EnqueueBatch(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	c.start("idle-1")
	testenv.WaitFor(t, 20*time.Second, "one replica owns all 16 shards", func() (bool, string) { return c.settled("idle-1") })
	// Owning a shard is not yet idle: until Redis confirms a shard's
	// wake-up subscription its mover cannot sleep long, and the
	// confirmation itself wakes it for one more call (what may have been
	// published before). On a loaded machine these come seconds after the
	// shards are owned, so the window opens once every channel is
	// subscribed and a second has passed with no mover call.
	channels := make([]string, nShards)
	for sh := range channels {
		channels[sh] = c.store.Layout().WakeChannel(sh)
	}
	prev := int64(-1)
	testenv.WaitFor(t, 30*time.Second, "every wake-up channel subscribed and no mover call for a second", func() (bool, string) {
		subs, err := c.rdb.PubSubShardNumSub(context.Background(), channels...).Result()
		if err != nil {
			return false, err.Error()
		}
		for _, ch := range channels {
			if subs[ch] == 0 {
				prev = -1
				return false, ch + " not subscribed"
			}
		}
		calls := c.commandCalls(t)
		scripts := calls["evalsha"] + calls["eval"] + calls["evalsha_ro"]
		quiet := scripts == prev
		prev = scripts
		if !quiet {
			time.Sleep(time.Second) // the next probe looks one second later
		}
		return quiet, fmt.Sprintf("%d script calls so far", scripts)
	})
	const window = 5 * time.Second
	before := c.commandCalls(t)
	time.Sleep(window) // a measurement window, not a wait for a result
	after := c.commandCalls(t)
	after["info"]-- // the first INFO
	var calls int64
	diff := map[string]int64{}
	for name, n := range after {
		if d := n - before[name]; d > 0 {
			diff[name] = d
			calls += d
		}
	}
	rate := float64(calls) / window.Seconds()
	// INFO commandstats also counts the commands a script runs inside.
	t.Logf("idle scheduler, 16 shards, 1000 future tasks: %d Redis commands (script-internal included) in %s = %.2f/s %v", calls, window, rate, diff)
	if rate > 5 {
		t.Fatalf("idle scheduler sends %.1f commands/s, want a handful (<= 5)", rate)
	}
}
