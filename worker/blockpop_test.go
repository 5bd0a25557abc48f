package worker

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// blockedPops returns how many clients Redis holds blocked in BLMPOP.
func blockedPops(t *testing.T, rdb *redis.Client) int {
	t.Helper()
	list, err := rdb.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(list, "\n") {
		if strings.Contains(line, "cmd=blmpop") && strings.Contains(line, "flags=b") {
			n++
		}
	}
	return n
}

// TestLongFetchStillStopsAtOnce: with the longest fetch timeout (1 min)
// and nothing to pop, a worker's Run returns soon after its ctx ends: the
// blocking pop in flight is unblocked, not waited out. The bound checked
// is half the fetch timeout, which only a pop waited out can exceed.
func TestLongFetchStillStopsAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardtest.Policy())
	_, _, stop := e.start(e.RDB, QueueOptions{Concurrency: 2}, func(context.Context, *Task) error { return nil },
		func(c *Config) { c.FetchTimeout, c.ShutdownGrace = MaxFetchTimeout, 0 })
	testenv.WaitFor(t, 20*time.Second, "a blocking pop in flight", func() (bool, string) {
		n := blockedPops(t, e.RDB)
		return n >= 1, fmt.Sprint(n, " blocked")
	})
	stopped := make(chan struct{})
	signalled := time.Now()
	go func() { stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Logf("stopped %v after the signal (fetch timeout %v)", time.Since(signalled).Round(time.Millisecond), MaxFetchTimeout)
	case <-time.After(MaxFetchTimeout / 2):
		t.Fatalf("Run still running %v after its ctx ended: the pop is waited out", MaxFetchTimeout/2)
	}
	if n := blockedPops(t, e.RDB); n != 0 {
		t.Errorf("%d pops still blocked after Run returned", n)
	}
}

// TestInterruptEndsABlockedPop: interrupt (a change of the layout) ends
// a pop blocked on the old lists with nothing, so that the fetch loop
// pops again with the current layout's keys; a task pushed afterwards is
// popped by the next pop on the same connection.
func TestInterruptEndsABlockedPop(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardtest.Policy())
	p := newBlockingPopper(e.RDB, e.Store, "hg|test|blockpop")
	defer p.close()
	ring := &readyRing{keys: []string{"{test}:ready:q"}}
	type result struct {
		entries []string
		err     error
	}
	ctx := testenv.Ctx(t, 2*MaxFetchTimeout)
	popOnce := func() <-chan result {
		out := make(chan result, 1)
		go func() {
			_, entries, err := p.pop(ctx, ring, 1, MaxFetchTimeout)
			out <- result{entries, err}
		}()
		return out
	}
	first := popOnce()
	testenv.WaitFor(t, 20*time.Second, "the pop blocked", func() (bool, string) {
		n := blockedPops(t, e.RDB)
		return n == 1, fmt.Sprint(n, " blocked")
	})
	p.interrupt()
	select {
	case r := <-first:
		if r.err != nil || len(r.entries) != 0 {
			t.Fatalf("interrupted pop returned %v, %v; want nothing, no error", r.entries, r.err)
		}
	case <-time.After(MaxFetchTimeout / 2):
		t.Fatal("interrupt did not end the blocked pop")
	}
	second := popOnce()
	if err := e.RDB.RPush(ctx, ring.keys[0], "x").Err(); err != nil {
		t.Fatal(err)
	}
	if r := <-second; r.err != nil || fmt.Sprint(r.entries) != "[x]" {
		t.Fatalf("pop after the interrupt returned %v, %v; want [x]", r.entries, r.err)
	}
}
