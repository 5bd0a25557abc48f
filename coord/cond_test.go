package coord

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// newCond returns a lock "jobs" (5 s leases) and its condition "ready"
// with the given liveness.
func newCond(t *testing.T, rdb redis.UniversalClient, liveness time.Duration) (*Lock, *Cond) {
	t.Helper()
	l, err := NewLock(rdb, "jobs", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCond(l, "ready", liveness)
	if err != nil {
		t.Fatal(err)
	}
	return l, c
}

// waitWaiters waits until the condition has n waiters in Redis.
func waitWaiters(t *testing.T, ctx context.Context, c *Cond, n int64) {
	t.Helper()
	testenv.WaitFor(t, 10*time.Second, fmt.Sprintf("%d waiters", n), func() (bool, string) {
		got, err := c.Waiters(ctx)
		return err == nil && got == n, fmt.Sprint(got, err)
	})
}

// waitResult is what one goroutine's Wait returned.
type waitResult struct {
	who   int
	woken bool
	err   error
}

// nextResult returns the next waiter's result from out, failing the test
// with never if none comes within d.
func nextResult(t *testing.T, out <-chan waitResult, d time.Duration, never string) waitResult {
	t.Helper()
	select {
	case r := <-out:
		return r
	case <-time.After(d):
		t.Fatal(never)
		return waitResult{}
	}
}

// startWaiter takes the lock and waits on c in a goroutine, which
// releases the lock it gets back and reports on out.
func startWaiter(t *testing.T, ctx context.Context, l *Lock, c *Cond, who int, timeout time.Duration, out chan<- waitResult) {
	t.Helper()
	le, err := l.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		le, woken, err := c.Wait(ctx, le, timeout)
		if err == nil {
			err = le.Release(ctx)
		}
		out <- waitResult{who, woken, err}
	}()
}

// Signal wakes the waiters one at a time, oldest first; Broadcast wakes
// every waiter there is and no later one; each woken waiter holds the
// lock again when Wait returns.
func TestCondSignalOldestFirstAndBroadcast(t *testing.T) {
	t.Parallel()
	rdb, ctx := setup(t)
	l, c := newCond(t, rdb, 0)
	out := signalThenBroadcast(t, ctx, l, c)
	// A waiter that came after the Broadcast is not woken by it.
	startWaiter(t, ctx, l, c, 4, 300*time.Millisecond, out)
	if r := <-out; r.woken || r.err != nil {
		t.Fatalf("late waiter: woken %v, %v; want a timeout", r.woken, r.err)
	}
	if ok, err := c.Signal(ctx); ok || err != nil {
		t.Fatalf("Signal with no waiter = %v, %v; want false", ok, err)
	}
	noHub(t, rdb)
}

// signalThenBroadcast starts three waiters, one after the other, and
// checks that a Signal wakes the first and a Broadcast the other two;
// it returns the channel their results came on.
func signalThenBroadcast(t *testing.T, ctx context.Context, l *Lock, c *Cond) chan waitResult {
	t.Helper()
	out := make(chan waitResult, 4)
	for i := 1; i <= 3; i++ {
		startWaiter(t, ctx, l, c, i, 0, out)
		waitWaiters(t, ctx, c, int64(i))
	}
	if ok, err := c.Signal(ctx); !ok || err != nil {
		t.Fatalf("Signal = %v, %v; want a waiter woken", ok, err)
	}
	if r := <-out; r.who != 1 || !r.woken || r.err != nil {
		t.Fatalf("after Signal: waiter %d returned woken %v, %v; want waiter 1, woken", r.who, r.woken, r.err)
	}
	waitWaiters(t, ctx, c, 2)
	if n, err := c.Broadcast(ctx); n != 2 || err != nil {
		t.Fatalf("Broadcast = %d, %v; want 2", n, err)
	}
	got := map[int]bool{}
	for range 2 {
		r := <-out
		if !r.woken || r.err != nil {
			t.Fatalf("waiter %d: woken %v, %v", r.who, r.woken, r.err)
		}
		got[r.who] = true
	}
	if !got[2] || !got[3] {
		t.Fatalf("Broadcast woke %v, want 2 and 3", got)
	}
	return out
}

// A Wait that times out takes the lock again and reports false; a Wait
// on a lease that is not held changes nothing; a lease of another lock
// is refused.
func TestCondWaitTimeoutAndMisuse(t *testing.T) {
	t.Parallel()
	rdb, ctx := setup(t)
	l, c := newCond(t, rdb, 0)
	le, err := l.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	le2, woken, err := c.Wait(ctx, le, 100*time.Millisecond)
	if err != nil || woken {
		t.Fatalf("Wait = woken %v, %v; want a timeout", woken, err)
	}
	if _, err := l.TryAcquire(ctx); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("the lock is free after a timed-out Wait: %v", err)
	}
	if err := le2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Wait(ctx, le2, time.Second); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Wait on a released lease: %v, want ErrNotHeld", err)
	}
	other, err := NewLock(rdb, "other", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ole, err := other.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Wait(ctx, ole, time.Second); !errors.Is(err, hourglass.ErrInvalidArgument) {
		t.Fatalf("Wait with another lock's lease: %v, want ErrInvalidArgument", err)
	}
	if n, err := c.Waiters(ctx); n != 0 || err != nil {
		t.Fatalf("waiters left: %d, %v", n, err)
	}
	for _, bad := range []struct {
		name     string
		liveness time.Duration
	}{{"", 0}, {"a{b}", 0}, {"ok", 10 * time.Millisecond}} {
		if _, err := NewCond(l, bad.name, bad.liveness); !errors.Is(err, hourglass.ErrInvalidArgument) {
			t.Errorf("NewCond(%q, %s): %v, want ErrInvalidArgument", bad.name, bad.liveness, err)
		}
	}
	noHub(t, rdb)
}

// register makes id a waiter of c (holding c's lock first) without a Go
// waiter behind it: a process that died right after it began to wait.
// Its liveness is a minute, so that it is still counted as live however
// slowly the test goes on; a Signal it is sent passes on after c's own
// liveness (the Signal's sender's), all the same.
func register(t *testing.T, ctx context.Context, l *Lock, c *Cond, id string) {
	t.Helper()
	le, err := l.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	keys := append([]string{l.key}, c.keys...)
	if n, err := condWaitScript.Run(ctx, l.rdb, keys, le.token, id, ms(time.Minute), l.channel, c.channel).Int(); n != 1 || err != nil {
		t.Fatalf("register %s: %d, %v", id, n, err)
	}
}

// A Signal that went to a waiter that then gives up (its ctx ended)
// passes to the next waiter at once; one that went to a dead waiter
// passes to a live one once the dead one's liveness lapsed, by the live
// one's own heartbeat.
func TestCondSignalIsNotSwallowed(t *testing.T) {
	t.Parallel()
	rdb, ctx := setup(t)
	l, c := newCond(t, rdb, 300*time.Millisecond)
	register(t, ctx, l, c, "quitter")
	register(t, ctx, l, c, "next")
	if ok, err := c.Signal(ctx); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if kind, err := c.check(ctx, "quitter", "give"); kind != "" || err != nil {
		t.Fatalf("give: %q, %v", kind, err)
	}
	// The hand-on made the wake-up hash anew: it expires all the same.
	if ttl := rdb.PTTL(ctx, c.keys[2]).Val(); ttl <= 0 {
		t.Fatalf("the wake-up hash after a hand-on: PTTL %v, want an expiry", ttl)
	}
	if kind, err := c.check(ctx, "next", "stay"); kind != "1" || err != nil {
		t.Fatalf("the next waiter did not get the Signal its predecessor gave up: %q, %v", kind, err)
	}

	register(t, ctx, l, c, "dead")
	out := make(chan waitResult, 1)
	startWaiter(t, ctx, l, c, 1, 0, out)
	waitWaiters(t, ctx, c, 2)
	start := time.Now()
	if ok, err := c.Signal(ctx); !ok || err != nil { // to "dead", the oldest
		t.Fatal(ok, err)
	}
	r := nextResult(t, out, 30*time.Second, "the Signal sent to a dead waiter never reached the live one")
	if !r.woken || r.err != nil {
		t.Fatalf("live waiter: woken %v, %v", r.woken, r.err)
	}
	if d := time.Since(start); d < c.liveness {
		t.Fatalf("the live waiter was woken after %v, before the dead one's liveness (%v) lapsed: the Signal went to two waiters", d, c.liveness)
	}
	t.Logf("a Signal sent to a dead waiter reached the live one after %v (liveness %v)", time.Since(start).Round(time.Millisecond), c.liveness)
	noHub(t, rdb)
}

// A waiter whose ctx ends while it takes the lock again, after it took a
// Signal, passes the Signal on: the next waiter is woken.
func TestCondSignalPassedOnWhenRelockFails(t *testing.T) {
	t.Parallel()
	rdb, ctx := setup(t)
	l, c := newCond(t, rdb, 0)
	out := make(chan waitResult, 2)
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	startWaiter(t, actx, l, c, 1, 0, out)
	waitWaiters(t, ctx, c, 1)
	startWaiter(t, ctx, l, c, 2, 0, out)
	waitWaiters(t, ctx, c, 2)
	held, err := l.Acquire(ctx) // waiter 1 cannot take the lock again
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := c.Signal(ctx); !ok || err != nil {
		t.Fatal(ok, err)
	}
	testenv.WaitFor(t, 10*time.Second, "waiter 1 takes the Signal", func() (bool, string) {
		n := rdb.HLen(ctx, c.keys[2]).Val() // the wake-ups not taken yet
		return n == 0, fmt.Sprint(n)
	})
	cancel() // while waiter 1 waits for the lock
	if r := <-out; r.who != 1 || r.err == nil {
		t.Fatalf("waiter %d returned %v, %v; want waiter 1 and its ctx's error", r.who, r.woken, r.err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if r := nextResult(t, out, 20*time.Second, "the Signal waiter 1 could not act on never reached waiter 2"); r.who != 2 || !r.woken || r.err != nil {
		t.Fatalf("waiter %d: woken %v, %v; want waiter 2 woken", r.who, r.woken, r.err)
	}
	noHub(t, rdb)
}

// Many producers and consumers in one process: every item is taken
// exactly once, and no consumer is left waiting with items in the list.
func TestCondProducerConsumer(t *testing.T) {
	t.Parallel()
	rdb, ctx := setup(t)
	l, c := newCond(t, rdb, 0)
	const items, consumers = 200, 4
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			le, err := l.Acquire(ctx)
			for err == nil {
				var v string
				v, err = rdb.LPop(ctx, "items").Result()
				switch {
				case err == redis.Nil:
					le, _, err = c.Wait(ctx, le, 0)
					continue
				case err != nil:
					continue
				case v == "stop":
					err = le.Release(ctx)
					return
				}
				mu.Lock()
				seen[v]++
				mu.Unlock()
			}
			t.Errorf("consumer: %v", err)
		}()
	}
	for i := range items {
		le, err := l.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rdb.RPush(ctx, "items", strconv.Itoa(i))
		if _, err := c.Signal(ctx); err != nil {
			t.Fatal(err)
		}
		if err := le.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	le, err := l.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range consumers {
		rdb.RPush(ctx, "items", "stop")
	}
	if _, err := c.Broadcast(ctx); err != nil {
		t.Fatal(err)
	}
	if err := le.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if len(seen) != items {
		t.Fatalf("%d distinct items taken, want %d", len(seen), items)
	}
	for v, n := range seen {
		if n != 1 {
			t.Fatalf("item %s taken %d times", v, n)
		}
	}
	noHub(t, rdb)
}

// On a Redis Cluster: the condition's keys share its lock's slot, and
// the wake-ups reach waiters whose connections are on other nodes.
func TestCondOnCluster(t *testing.T) {
	t.Parallel()
	cl := testenv.StartRedisCluster(t, 3, 0)
	rdb := cl.Client(t)
	ctx := testenv.Ctx(t, time.Minute)
	l, c := newCond(t, rdb, 0)
	signalThenBroadcast(t, ctx, l, c)
	noHub(t, rdb)
}
