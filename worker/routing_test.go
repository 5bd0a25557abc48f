package worker

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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
	if _, err := e.Store.SetRouting(ctx, "q", &shard.Routing{NotTags: []string{"canary"}}); err != nil { // before either starts
		t.Fatal(err)
	}
	p := startPair(t, e)
	// route sets the routing and waits for both workers to apply it (the
	// announcement reaches them within a moment; a task popped before
	// that may still run where the old routing let it).
	route := func(r *shard.Routing, stableOut, canaryOut bool) {
		t.Helper()
		if _, err := e.Store.SetRouting(ctx, "q", r); err != nil {
			t.Fatal(err)
		}
		p.wait("both workers applied the routing", "hourglass_worker_queue_excluded", flag(stableOut), flag(canaryOut))
	}
	route(&shard.Routing{NotTags: []string{"canary"}}, false, true)
	batch := func(prefix string, n int) map[string]int {
		t.Helper()
		for i := range n {
			e.enqueue(fmt.Sprintf("%s%03d", prefix, i), 0)
		}
		by := map[string]int{}
		testenv.WaitFor(t, 30*time.Second, "every task of "+prefix+" run", func() (bool, string) {
			clear(by)
			done := 0
			for id, w := range p.ranBy() {
				if strings.HasPrefix(id, prefix) {
					by[w]++
					done++
				}
			}
			return done == n, fmt.Sprint(done, " of ", n)
		})
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
	p.wait("both excluded by an unreadable routing", "hourglass_worker_queue_excluded", 1, 1)
}

// TestRoutingShare (#29): a share splits the queue's tasks by shard: with
// 50% of two shards the canary set pops one shard's ready lists and the
// others the other's, so each task runs on the side its shard says; set
// and cleared at run time.
func TestRoutingShare(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardtest.Policy())
	ctx := testenv.Ctx(t, time.Minute)
	p := startPair(t, e)
	share := &shard.Share{Percent: 50, Tags: []string{"canary"}}
	if _, err := e.Store.SetRouting(ctx, "q", &shard.Routing{Share: share}); err != nil {
		t.Fatal(err)
	}
	n := e.Layout().Existing()
	p.wait("both workers applied the share", "hourglass_worker_queue_share", 50, 50)
	const total = 200
	for i := range total {
		e.enqueue(fmt.Sprintf("s%03d", i), 0)
	}
	testenv.WaitFor(t, 30*time.Second, "every task run", func() (bool, string) {
		return len(p.ranBy()) == total, fmt.Sprint(len(p.ranBy()))
	})
	by := map[string]int{}
	shardsOf := map[string]map[int]bool{"canary": {}, "stable": {}}
	for id, w := range p.ranBy() {
		by[w]++
		sh := e.Layout().ShardOf(id)
		shardsOf[w][sh] = true
		if want := share.Takes("q", true, sh, n, time.Now()); (w == "canary") != want {
			t.Errorf("task %s of shard %d ran on the %s worker", id, sh, w)
		}
	}
	t.Logf("share %s over %d shards: %v", share, n, by)
	// Whatever Takes says: the sides ran the tasks of one shard each.
	if len(shardsOf["canary"]) != 1 || len(shardsOf["stable"]) != 1 {
		t.Errorf("the canary ran tasks of shards %v, the other of %v; want one each", shardsOf["canary"], shardsOf["stable"])
	}
	// Cleared: both take every shard again.
	if _, err := e.Store.SetRouting(ctx, "q", nil); err != nil {
		t.Fatal(err)
	}
	p.wait("both workers dropped the share", "hourglass_worker_queue_share", 0, 0)
}

// TestShareTakes: the canary set takes Percent × n / 100 shards: whole
// ones, and the boundary shard for the rest of a shard as a part of each
// period; at every moment each shard is one side's, and over a period
// the canary set's shards average the share exactly; Any and NextChange
// agree with Takes.
func TestShareTakes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ percent, n, full, part int }{
		{10, 16, 1, 60}, {10, 2, 0, 20}, {10, 1, 0, 10}, {99, 4, 3, 96}, {50, 2, 1, 0}, {10, 32, 3, 20},
	} {
		s := shard.Share{Percent: c.percent, Tags: []string{"canary"}}
		if full, part := s.Split(c.n); full != c.full || part != c.part {
			t.Errorf("%d%% of %d: Split %d, %d; want %d, %d", c.percent, c.n, full, part, c.full, c.part)
		}
		base := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
		const steps = 1000 // one period, in steps of 10 ms
		held := 0
		for k := range steps {
			now := base.Add(time.Duration(k) * shard.SharePeriod / steps)
			canary, others := 0, 0
			for sh := range c.n {
				cs, os := s.Takes("emails", true, sh, c.n, now), s.Takes("emails", false, sh, c.n, now)
				if cs == os {
					t.Fatalf("%d%% of %d at %v: shard %d is both sides' or neither's", c.percent, c.n, now, sh)
				}
				if cs {
					canary++
				} else {
					others++
				}
			}
			held += canary
			if s.Any(true, c.n, now) != (canary > 0) || s.Any(false, c.n, now) != (others > 0) {
				t.Fatalf("%d%% of %d at %v: Any disagrees with %d and %d shards", c.percent, c.n, now, canary, others)
			}
			if next := s.NextChange(c.n, now); !next.IsZero() {
				before, after := next.Add(-time.Millisecond), next
				if s.Any(true, c.n, before) == s.Any(true, c.n, after) && c.full == 0 {
					t.Fatalf("%d%% of %d: nothing changes at %v", c.percent, c.n, next)
				}
			}
		}
		if got, want := float64(held)/steps, float64(c.percent*c.n)/100; got < want-0.011 || got > want+0.011 {
			t.Errorf("%d%% of %d: the canary set held %.2f shards on average, want %.2f", c.percent, c.n, got, want)
		}
	}
}

// TestPopWait: a pop for a queue whose share has a boundary shard waits
// at most until it changes hands, in whole seconds, at least one; other
// queues leave it unbounded (0).
func TestPopWait(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC) // a period's start
	sliced, whole, none := &queue{name: "a"}, &queue{name: "b"}, &queue{name: "c"}
	sliced.share.Store(&queueShare{Share: shard.Share{Percent: 10, Tags: []string{"c"}}}) // of 16: 60% of the boundary's period
	whole.share.Store(&queueShare{Share: shard.Share{Percent: 50, Tags: []string{"c"}}})  // of 16: 8 shards
	qs := []*queue{sliced, whole, none}
	for at, want := range map[time.Duration]time.Duration{0: 6 * time.Second, 5500 * time.Millisecond: time.Second, 6 * time.Second: 4 * time.Second, 9990 * time.Millisecond: time.Second} {
		if got := popWait(qs, []int{0, 1, 2}, 16, base.Add(at)); got != want {
			t.Errorf("at +%s: wait %s, want %s", at, got, want)
		}
	}
	if got := popWait(qs, []int{1, 2}, 16, base); got != 0 {
		t.Errorf("without a boundary shard: wait %s, want 0", got)
	}
}

// pair is a stable and a canary worker on queue "q" that record which of
// them ran each task.
type pair struct {
	t                    *testing.T
	stableReg, canaryReg *prometheus.Registry
	mu                   sync.Mutex
	ran                  map[string]string // task id -> "stable" or "canary"
}

// startPair starts the two workers (Concurrency 4; the canary of version
// 1.1.0-rc1 tagged canary, the stable one of 1.0.0).
func startPair(t *testing.T, e *env) *pair {
	p := &pair{t: t, ran: map[string]string{}}
	handler := func(name string) Handler {
		return func(_ context.Context, task *Task) error {
			p.mu.Lock()
			p.ran[task.ID] = name
			p.mu.Unlock()
			return nil
		}
	}
	opts := QueueOptions{Concurrency: 4}
	_, p.stableReg, _ = e.start(e.RDB, opts, handler("stable"), func(c *Config) { c.Version = "1.0.0" })
	_, p.canaryReg, _ = e.start(e.RDB, opts, handler("canary"), func(c *Config) { c.Version = "1.1.0-rc1"; c.Tags = []string{"canary"} })
	return p
}

// wait waits until gauge name reads stable on the stable worker and
// canary on the canary.
func (p *pair) wait(what, name string, stable, canary float64) {
	p.t.Helper()
	testenv.WaitFor(p.t, 10*time.Second, what, func() (bool, string) {
		s, c := gauge(p.t, p.stableReg, name), gauge(p.t, p.canaryReg, name)
		return s == stable && c == canary, fmt.Sprintf("%s: stable %v, canary %v", name, s, c)
	})
}

// ranBy returns a copy of who ran each task.
func (p *pair) ranBy() map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.ran)
}
