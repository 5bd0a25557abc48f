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
