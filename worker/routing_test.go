package worker

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestRoutingByTagAndVersion (#29): a stable and a canary worker on one
// queue. With the queue routed "not canary" the canary takes none of its
// tasks; routed to the canaries only, or to the canary's version, the
// stable one takes none, and each change applies at once (announced); a
// cleared routing admits both again.
func TestRoutingByTagAndVersion(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardtest.Policy())
	ctx := testenv.Ctx(t, time.Minute)
	var mu sync.Mutex
	ran := map[string]string{} // task id -> worker
	handler := func(name string) Handler {
		return func(_ context.Context, task *Task) error {
			mu.Lock()
			ran[task.ID] = name
			mu.Unlock()
			return nil
		}
	}
	if _, err := e.Store.SetRouting(ctx, "q", &shard.Routing{NotTags: []string{"canary"}}); err != nil { // before either starts
		t.Fatal(err)
	}
	opts := QueueOptions{Concurrency: 4}
	_, stableReg, _ := e.start(e.RDB, opts, handler("stable"), func(c *Config) { c.Version = "1.0.0" })
	_, canaryReg, _ := e.start(e.RDB, opts, handler("canary"), func(c *Config) { c.Version = "1.1.0-rc1"; c.Tags = []string{"canary"} })
	// route sets the routing and waits for both workers to apply it (the
	// announcement reaches them within a moment; a task popped before
	// that may still run where the old routing let it).
	route := func(r *shard.Routing, stableOut, canaryOut bool) {
		t.Helper()
		if _, err := e.Store.SetRouting(ctx, "q", r); err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, 10*time.Second, "both workers applied the routing", func() (bool, string) {
			s, c := gauge(t, stableReg, "hourglass_worker_queue_excluded"), gauge(t, canaryReg, "hourglass_worker_queue_excluded")
			return s == flag(stableOut) && c == flag(canaryOut), fmt.Sprintf("excluded: stable %v, canary %v", s, c)
		})
	}
	route(&shard.Routing{NotTags: []string{"canary"}}, false, true)
	batch := func(prefix string, n int) map[string]int {
		t.Helper()
		for i := range n {
			e.enqueue(fmt.Sprintf("%s%03d", prefix, i), 0)
		}
		testenv.WaitFor(t, 30*time.Second, "every task of "+prefix+" run", func() (bool, string) {
			mu.Lock()
			defer mu.Unlock()
			done := 0
			for id := range ran {
				if len(id) > len(prefix) && id[:len(prefix)] == prefix {
					done++
				}
			}
			return done == n, fmt.Sprint(done, " of ", n)
		})
		mu.Lock()
		defer mu.Unlock()
		by := map[string]int{}
		for id, w := range ran {
			if len(id) > len(prefix) && id[:len(prefix)] == prefix {
				by[w]++
			}
		}
		return by
	}
	if by := batch("a", 200); by["canary"] != 0 {
		t.Fatalf("not canary: %v", by)
	}
	route(&shard.Routing{Tags: []string{"canary"}}, true, false)
	if by := batch("b", 100); by["stable"] != 0 {
		t.Fatalf("canaries only: %v", by)
	}
	route(&shard.Routing{Versions: []string{"1.0.0"}}, false, true)
	if by := batch("c", 100); by["canary"] != 0 {
		t.Fatalf("only version 1.0.0: %v", by)
	}
	route(nil, false, false)
	by := batch("d", 400)
	t.Logf("routing cleared: %v", by)
	if by["canary"] == 0 || by["stable"] == 0 {
		t.Fatalf("cleared, both workers take the queue's tasks again: %v", by)
	}
	// A routing no worker can read (a newer release's, a hand edit)
	// excludes them all: it may have excluded them.
	if err := e.RDB.HSet(ctx, e.Layout().Paused(), "|route|q", "{not json").Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.RDB.Publish(ctx, e.Layout().ControlChannel(), "route q").Err(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "both excluded by an unreadable routing", func() (bool, string) {
		s, c := gauge(t, stableReg, "hourglass_worker_queue_excluded"), gauge(t, canaryReg, "hourglass_worker_queue_excluded")
		return s == 1 && c == 1, fmt.Sprintf("excluded: stable %v, canary %v", s, c)
	})
}

// TestRoutingShare (#29): a share splits the queue's tasks by shard: the
// canary set pops the shards Share.Takes gives it and the others the
// rest, so each task runs on the side its shard says; set, changed and
// cleared at run time.
func TestRoutingShare(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardtest.Policy())
	ctx := testenv.Ctx(t, time.Minute)
	var mu sync.Mutex
	ran := map[string]string{} // task id -> worker
	handler := func(name string) Handler {
		return func(_ context.Context, task *Task) error {
			mu.Lock()
			ran[task.ID] = name
			mu.Unlock()
			return nil
		}
	}
	opts := QueueOptions{Concurrency: 4}
	_, stableReg, _ := e.start(e.RDB, opts, handler("stable"), func(c *Config) { c.Version = "1.0.0" })
	_, canaryReg, _ := e.start(e.RDB, opts, handler("canary"), func(c *Config) { c.Version = "1.1.0"; c.Tags = []string{"canary"} })
	share := &shard.Share{Percent: 10, Tags: []string{"canary"}}
	if _, err := e.Store.SetRouting(ctx, "q", &shard.Routing{Share: share}); err != nil {
		t.Fatal(err)
	}
	n := e.Layout().Existing()
	testenv.WaitFor(t, 10*time.Second, "both workers applied the share", func() (bool, string) {
		s, c := gauge(t, stableReg, "hourglass_worker_queue_share"), gauge(t, canaryReg, "hourglass_worker_queue_share")
		want := 100 * float64(share.CanaryShards(n)) / float64(n)
		return c == want && s == 100-want, fmt.Sprintf("share: stable %v, canary %v", s, c)
	})
	const total = 200
	for i := range total {
		e.enqueue(fmt.Sprintf("s%03d", i), 0)
	}
	testenv.WaitFor(t, 30*time.Second, "every task run", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(ran) == total, fmt.Sprint(len(ran))
	})
	by := map[string]int{}
	shardsOf := map[string]map[int]bool{"canary": {}, "stable": {}}
	mu.Lock()
	for id, w := range ran {
		by[w]++
		sh := e.Layout().ShardOf(id)
		shardsOf[w][sh] = true
		if want := share.Takes("q", true, sh, n); (w == "canary") != want {
			t.Errorf("task %s of shard %d ran on the %s worker", id, sh, w)
		}
	}
	mu.Unlock()
	// Whatever Takes says: the sides ran the tasks of disjoint sets of
	// shards, the canary's of CanaryShards of them.
	for sh := range shardsOf["canary"] {
		if shardsOf["stable"][sh] {
			t.Errorf("both sides ran tasks of shard %d", sh)
		}
	}
	if len(shardsOf["canary"]) != share.CanaryShards(n) || len(shardsOf["stable"]) != n-share.CanaryShards(n) {
		t.Errorf("the canary ran tasks of %d shards, the other of %d; want %d and %d", len(shardsOf["canary"]), len(shardsOf["stable"]), share.CanaryShards(n), n-share.CanaryShards(n))
	}
	t.Logf("share %s over %d shards: %v", share, n, by)
	if by["canary"] == 0 || by["stable"] == 0 {
		t.Fatalf("one side ran nothing: %v", by)
	}
	// Cleared: both take every shard again.
	if _, err := e.Store.SetRouting(ctx, "q", nil); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "both workers dropped the share", func() (bool, string) {
		s, c := gauge(t, stableReg, "hourglass_worker_queue_share"), gauge(t, canaryReg, "hourglass_worker_queue_share")
		return s == 0 && c == 0, fmt.Sprintf("share: stable %v, canary %v", s, c)
	})
}

// TestShareTakes: the canary set takes Percent of the shards, rounded,
// at least one and at most all but one, consecutive from a shard the
// queue's name picks; the two sides never overlap and cover every shard.
func TestShareTakes(t *testing.T) {
	t.Parallel()
	s := shard.Share{Percent: 10, Tags: []string{"canary"}}
	for n, want := range map[int]int{1: 0, 2: 1, 4: 1, 16: 2, 32: 3, 100: 10} {
		if got := s.CanaryShards(n); got != want {
			t.Errorf("CanaryShards(%d) = %d, want %d", n, got, want)
		}
		canary := 0
		for sh := range n {
			c, o := s.Takes("emails", true, sh, n), s.Takes("emails", false, sh, n)
			if c == o {
				t.Fatalf("n %d shard %d: canary %v, others %v", n, sh, c, o)
			}
			if c {
				canary++
			}
		}
		if canary != want {
			t.Errorf("n %d: the canary set takes %d shards, want %d", n, canary, want)
		}
	}
	if (shard.Share{Percent: 99, Tags: []string{"c"}}).CanaryShards(4) != 3 {
		t.Error("99% of 4 shards is not all but one")
	}
}
