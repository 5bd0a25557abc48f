package coord

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// call is one limiter request as the client saw it: the server decided
// at some instant between sent and recv.
type call struct {
	sent, recv time.Time
	res        Result
}

func allow(t *testing.T, ctx context.Context, lim Limiter) call {
	t.Helper()
	sent := time.Now()
	r, err := lim.Allow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return call{sent, time.Now(), r}
}

// sleepUntil waits for a computed instant: the tests below aim requests at
// window boundaries of the server clock.
func sleepUntil(ctx context.Context, at time.Time) {
	t := time.NewTimer(time.Until(at))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// boundaryBurst sends limit requests shortly before a boundary of the
// server clock's fixed windows of length window and limit more right
// after it, and returns both batches. It retries (up to 5 times, on fresh
// limiters from rdbLim) when the machine was too slow to aim the batches.
func boundaryBurst(t *testing.T, ctx context.Context, rdbLim func(i int) Limiter, probe *FixedWindow, limit int, window time.Duration) (before, after []call) {
	t.Helper()
	for attempt := 0; attempt < 5; attempt++ {
		lim := rdbLim(attempt)
		// The server decided the probe within [sent, recv]: the boundary
		// (at ResetAfter from then) lies within [early, late].
		p := allow(t, ctx, probe)
		if p.recv.Sub(p.sent) > 30*time.Millisecond {
			t.Logf("attempt %d: probe took %s; machine too slow, again", attempt, p.recv.Sub(p.sent))
			continue
		}
		early, late := p.sent.Add(p.res.ResetAfter), p.recv.Add(p.res.ResetAfter)
		if p.res.ResetAfter < 200*time.Millisecond {
			early, late = early.Add(window), late.Add(window)
		}
		sleepUntil(ctx, early.Add(-80*time.Millisecond))
		before, after = nil, nil
		for i := 0; i < limit; i++ {
			before = append(before, allow(t, ctx, lim))
		}
		if last := before[len(before)-1]; last.recv.After(early.Add(-5 * time.Millisecond)) {
			t.Logf("attempt %d: first batch ended %s before the boundary; machine too slow, again", attempt, early.Sub(last.recv))
			continue
		}
		sleepUntil(ctx, late.Add(10*time.Millisecond))
		for i := 0; i < limit; i++ {
			after = append(after, allow(t, ctx, lim))
		}
		return before, after
	}
	t.Fatal("could not land a batch before a window boundary in 5 attempts")
	return nil, nil
}

func TestFixedWindowAdmitsBoundaryDoubleBurst(t *testing.T) {
	t.Parallel()
	rdb, ctx := setup(t)
	const limit, window = 5, time.Second
	probe, _ := NewFixedWindow(rdb, "probe", 1<<30, window)
	mk := func(i int) Limiter {
		fw, err := NewFixedWindow(rdb, fmt.Sprintf("api-%d", i), limit, window)
		if err != nil {
			t.Fatal(err)
		}
		return fw
	}
	before, after := boundaryBurst(t, ctx, mk, probe, limit, window)
	for i, c := range append(append([]call{}, before...), after...) {
		if !c.res.Allowed {
			t.Fatalf("request %d of the double burst denied: %+v", i, c.res)
		}
	}
	span := after[len(after)-1].recv.Sub(before[0].sent)
	t.Logf("fixed window (%d per %s) admitted %d requests within %s across a boundary", limit, window, 2*limit, span)
	if span >= window {
		t.Fatalf("the double burst took %s, not less than one window", span)
	}
	if b := before[len(before)-1].res; b.Remaining != 0 || b.ResetAfter > 200*time.Millisecond {
		t.Fatalf("first batch was not at the end of a full window: %+v", b)
	}
	if a := after[0].res; a.Remaining != limit-1 || a.ResetAfter < window-200*time.Millisecond {
		t.Fatalf("second batch was not at the start of a fresh window: %+v", a)
	}
	lim := mk(99)
	for i := 0; i < limit; i++ {
		allow(t, ctx, lim)
	}
	if c := allow(t, ctx, lim); c.res.Allowed || c.res.RetryAfter <= 0 || c.res.RetryAfter > window {
		t.Fatalf("request over the limit within a window: %+v", c.res)
	}
}

func TestSlidingWindowRefusesBoundaryDoubleBurst(t *testing.T) {
	t.Parallel()
	rdb, ctx := setup(t)
	const limit, window = 5, time.Second
	probe, _ := NewFixedWindow(rdb, "probe", 1<<30, window)
	mk := func(i int) Limiter {
		sw, err := NewSlidingWindow(rdb, fmt.Sprintf("api-%d", i), limit, window)
		if err != nil {
			t.Fatal(err)
		}
		return sw
	}
	before, after := boundaryBurst(t, ctx, mk, probe, limit, window)
	for i, c := range before {
		if !c.res.Allowed {
			t.Fatalf("request %d of the first batch denied: %+v", i, c.res)
		}
	}
	for i, c := range after {
		if c.res.Allowed {
			t.Fatalf("request %d of the second batch admitted %s after the first batch: the window holds more than %d",
				i, c.recv.Sub(before[0].sent), limit)
		}
		// It may go once the first batch's oldest request leaves the
		// window: a window after it was admitted.
		if earliest := before[0].sent.Add(window); c.recv.Add(c.res.RetryAfter).Before(earliest) {
			t.Fatalf("RetryAfter %s points before the first request left the window", c.res.RetryAfter)
		}
	}
	t.Logf("sliding window (%d per %s): second batch denied, RetryAfter %s", limit, window, after[0].res.RetryAfter)
}

func TestSlidingWindowAtMostLimitInAnyWindow(t *testing.T) {
	t.Parallel()
	rdb, ctx := setup(t)
	const limit, window = 5, 300 * time.Millisecond
	sw, _ := NewSlidingWindow(rdb, "steady", limit, window)
	var admitted []call
	var denied int
	tick := time.NewTicker(7 * time.Millisecond) // offered load ~ 140/s, 28 per window
	defer tick.Stop()
	end := time.Now().Add(4 * window)
	for time.Now().Before(end) {
		<-tick.C
		c := allow(t, ctx, sw)
		if c.res.Allowed {
			admitted = append(admitted, c)
		} else {
			denied++
		}
	}
	// The server admitted request i+limit at least a window after request
	// i; both instants lie within their calls' [sent, recv].
	for i := 0; i+limit < len(admitted); i++ {
		if gap := admitted[i+limit].recv.Sub(admitted[i].sent); gap < window {
			t.Fatalf("%d requests admitted within %s (< %s)", limit+1, gap, window)
		}
	}
	t.Logf("sliding window %d per %s under ~140 req/s for %s: %d admitted, %d denied", limit, window, 4*window, len(admitted), denied)
	if len(admitted) < limit*2 {
		t.Fatalf("only %d admitted over 4 windows", len(admitted))
	}
}

func TestLeakyBucketSpacesRequestsEvenly(t *testing.T) {
	t.Parallel()
	rdb, ctx := setup(t)
	const interval, capacity = 100 * time.Millisecond, 5
	lb, err := NewLeakyBucket(rdb, "smooth", interval, capacity)
	if err != nil {
		t.Fatal(err)
	}
	var calls []call
	for i := 0; i <= capacity; i++ {
		calls = append(calls, allow(t, ctx, lb))
	}
	var delays []time.Duration
	for i, c := range calls {
		if !c.res.Allowed {
			t.Fatalf("request %d of a burst of capacity+1 denied: %+v", i, c.res)
		}
		delays = append(delays, c.res.Delay)
	}
	t.Logf("leaky bucket (1 per %s, capacity %d) delays of a burst: %v", interval, capacity, delays)
	if delays[0] != 0 {
		t.Fatalf("first request delayed %s", delays[0])
	}
	// Each request is scheduled one interval after the previous one. The
	// server's clock moved by at most recv[k]-sent[k-1] between them, so
	// the delays step down from the interval by at most that.
	for k := 1; k < len(calls); k++ {
		step := delays[k] - delays[k-1]
		slack := calls[k].recv.Sub(calls[k-1].sent)
		if step > interval || step < interval-slack {
			t.Fatalf("delay step %d is %s, want %s minus at most %s", k, step, interval, slack)
		}
	}
	// The queue is full: the next request would wait more than capacity
	// intervals. Unless the burst took an interval or more (a starved
	// machine): the first request has left the queue then, and the next
	// is admitted, at most capacity intervals out.
	switch c := allow(t, ctx, lb); {
	case c.recv.Sub(calls[0].sent) < interval && (c.res.Allowed || c.res.RetryAfter <= 0 || c.res.RetryAfter > interval):
		t.Fatalf("request over capacity: %+v", c.res)
	case c.res.Allowed && c.res.Delay > capacity*interval:
		t.Fatalf("request after a slow burst (%s): %+v, want a delay of at most %s", c.recv.Sub(calls[0].sent), c.res, capacity*interval)
	}
	// Requests slower than the rate wait for nothing.
	if err := lb.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	first := allow(t, ctx, lb)
	sleepUntil(ctx, first.recv.Add(interval+5*time.Millisecond))
	if c := allow(t, ctx, lb); !c.res.Allowed || c.res.Delay != 0 {
		t.Fatalf("request after a quiet interval: %+v", c.res)
	}
	// Wait paces callers: consecutive Waits return about one interval
	// apart (logged only).
	if err := lb.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	var at []time.Time
	for i := 0; i < 4; i++ {
		if err := Wait(ctx, lb); err != nil {
			t.Fatal(err)
		}
		at = append(at, time.Now())
	}
	var gaps []time.Duration
	for i := 1; i < len(at); i++ {
		gaps = append(gaps, at[i].Sub(at[i-1]).Round(time.Millisecond))
	}
	t.Logf("Wait on the leaky bucket released callers %v apart", gaps)
}

func TestTokenBucketBurstThenRate(t *testing.T) {
	t.Parallel()
	rdb, ctx := setup(t)
	const rate, burst = 20, 5
	const interval = time.Second / rate
	tb, err := NewTokenBucket(rdb, "partner", rate, time.Second, burst)
	if err != nil {
		t.Fatal(err)
	}
	// The burst is admitted at once.
	var began time.Time
	for i := 0; i < burst; i++ {
		c := allow(t, ctx, tb)
		if !c.res.Allowed {
			t.Fatalf("request %d of the burst denied: %+v", i, c.res)
		}
		if i == 0 {
			began = c.sent
		}
		// redis_rate computes Remaining in floating point and truncates:
		// it may read one low. On a busy machine the burst's requests can
		// be an interval apart, and the bucket regains a token each.
		refilled := int(c.recv.Sub(began) / interval)
		if r := c.res.Remaining; r < burst-2-i || r > burst-1-i+refilled {
			t.Fatalf("request %d of the burst: remaining %d, want %d (or one less, or up to %d more refilled)", i, r, burst-1-i, refilled)
		}
	}
	c := allow(t, ctx, tb)
	for i := 0; c.res.Allowed && i < 5; i++ {
		// The bucket refilled a token while the burst ran (a slow
		// machine): take it.
		c = allow(t, ctx, tb)
	}
	if c.res.Allowed || c.res.RetryAfter <= 0 || c.res.RetryAfter > interval {
		t.Fatalf("request after the burst: %+v, want denied with RetryAfter in (0, %s]", c.res, interval)
	}
	// Then the rate: a client that waits RetryAfter gets one request per
	// interval.
	start := c.sent
	var admitted int
	const run = time.Second
	for time.Since(start) < run {
		c := allow(t, ctx, tb)
		if c.res.Allowed {
			admitted++
			continue
		}
		sleepUntil(ctx, c.recv.Add(c.res.RetryAfter))
	}
	elapsed := time.Since(start)
	most := int(elapsed/interval) + 1
	t.Logf("token bucket %d/s burst %d: %d admitted in %s after the burst (rate allows %d)", rate, burst, admitted, elapsed.Round(time.Millisecond), most)
	if admitted > most {
		t.Fatalf("%d admitted in %s, the rate allows %d", admitted, elapsed, most)
	}
	if admitted < most/2 {
		t.Fatalf("%d admitted in %s, far below the rate (%d)", admitted, elapsed, most)
	}
	if err := tb.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if c := allow(t, ctx, tb); !c.res.Allowed || c.res.Remaining < burst-2 {
		t.Fatalf("after Reset: %+v", c.res)
	}
}
