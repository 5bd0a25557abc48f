package coord

import (
	"context"
	"fmt"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass"
	"github.com/hourglass-sched/hourglass/internal/errtext"
)

// Result is the answer of a rate limiter to one request.
type Result struct {
	// Allowed reports whether the request was admitted (and counted).
	Allowed bool
	// Remaining is how many more single requests would be admitted right
	// now.
	Remaining int
	// RetryAfter is, for a denied request, how long until the same
	// request would be admitted if nothing else arrives; 0 if allowed.
	RetryAfter time.Duration
	// ResetAfter is how long until the limiter is back to its initial,
	// empty state if nothing else arrives.
	ResetAfter time.Duration
	// Delay is, for a LeakyBucket, how long an admitted request must wait
	// for its turn before it acts; 0 for the other limiters.
	Delay time.Duration
}

// Limiter is the interface of every rate limiter of this package. Each
// limiter is one Redis key (or a ZSET for SlidingWindow), updated by one
// Lua script per call that reads Redis server time, so every process
// shares one clock and one budget. Limiters are safe for concurrent use.
//
// Limits common to all: on a Redis failover the replica may lack the
// latest counts, so a limit can be exceeded briefly; if Redis is
// unreachable the call fails and the caller decides (fail open or closed).
type Limiter interface {
	// Allow asks to admit one request.
	Allow(ctx context.Context) (Result, error)
	// AllowN asks to admit n requests at once (all or none).
	AllowN(ctx context.Context, n int) (Result, error)
	// Reset forgets all past requests.
	Reset(ctx context.Context) error
}

// Wait blocks until lim admits one request, as long as ctx allows: after
// a denial it sleeps RetryAfter (a known time, not a poll) and asks
// again; for a LeakyBucket it then sleeps the admitted request's Delay.
// Many waiters of one limiter all wake after RetryAfter and race for the
// next slot. A LeakyBucket slot reserved before ctx ended is not given
// back.
func Wait(ctx context.Context, lim Limiter) error {
	for {
		r, err := lim.Allow(ctx)
		if err != nil {
			return err
		}
		d := r.Delay
		if !r.Allowed {
			d = max(r.RetryAfter, time.Millisecond)
		}
		if d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return errtext.Errorf("wait for rate limiter: %w", ctx.Err())
			case <-t.C:
			}
		}
		if r.Allowed {
			return nil
		}
	}
}

func checkLimit(kind, name, what string, n int) error {
	if n < 1 {
		return fmt.Errorf("%w: %s %q: %s %d is below 1", hourglass.ErrInvalidArgument, kind, name, what, n)
	}
	return nil
}

func checkCost(kind, name string, n, most int) error {
	if n < 1 || n > most {
		return fmt.Errorf("%w: %s %q: n %d is outside 1..%d", hourglass.ErrInvalidArgument, kind, name, n, most)
	}
	return nil
}

// TokenBucket is a token bucket implemented as GCRA (the generic cell
// rate algorithm) by the redis_rate library: a bucket of burst tokens
// refilled at rate tokens per period, kept as one timestamp (the
// theoretical arrival time) in Redis. It admits a burst of up to burst
// requests at once, then requests at the rate. The library computes in
// floating-point seconds: Result.Remaining may read one lower than the
// exact count. Key: rate:{name}:tb.
type TokenBucket struct {
	rdb   redis.UniversalClient
	lim   *redis_rate.Limiter
	name  string
	key   string
	limit redis_rate.Limit
}

// NewTokenBucket returns a token bucket admitting rate requests per
// period, with bursts of up to burst. All arguments must be positive.
func NewTokenBucket(rdb redis.UniversalClient, name string, rate int, period time.Duration, burst int) (*TokenBucket, error) {
	if err := checkName("token bucket", name); err != nil {
		return nil, err
	}
	if err := checkLimit("token bucket", name, "rate", rate); err != nil {
		return nil, err
	}
	if err := checkLimit("token bucket", name, "burst", burst); err != nil {
		return nil, err
	}
	if err := checkDuration("token bucket", name, "period", period); err != nil {
		return nil, err
	}
	return &TokenBucket{
		rdb: rdb, lim: redis_rate.NewLimiter(rdb), name: name,
		key:   key(name, "tb"),
		limit: redis_rate.Limit{Rate: rate, Period: period, Burst: burst},
	}, nil
}

// Allow asks to admit one request.
func (b *TokenBucket) Allow(ctx context.Context) (Result, error) { return b.AllowN(ctx, 1) }

// AllowN asks to admit n requests at once (1 <= n <= burst).
func (b *TokenBucket) AllowN(ctx context.Context, n int) (Result, error) {
	if err := checkCost("token bucket", b.name, n, b.limit.Burst); err != nil {
		return Result{}, err
	}
	r, err := b.lim.AllowN(ctx, b.key, b.limit, n)
	if err != nil {
		return Result{}, errtext.Errorf("token bucket %q: %w", b.name, err)
	}
	return Result{
		Allowed:    r.Allowed == n,
		Remaining:  r.Remaining,
		RetryAfter: max(r.RetryAfter, 0),
		ResetAfter: max(r.ResetAfter, 0),
	}, nil
}

// Reset refills the bucket.
func (b *TokenBucket) Reset(ctx context.Context) error {
	if err := b.lim.Reset(ctx, b.key); err != nil {
		return errtext.Errorf("token bucket %q: reset: %w", b.name, err)
	}
	return nil
}

// FixedWindow counts requests per fixed window aligned on the Redis
// server clock (window i covers [i·W, (i+1)·W) since the unix epoch) and
// admits at most limit per window. It is the cheapest limiter (one small
// hash) but lets through up to 2·limit requests around a window boundary:
// limit at the end of one window and limit at the start of the next. Use
// SlidingWindow when that burst matters. Key: {name}:fw.
type FixedWindow struct {
	rdb    redis.UniversalClient
	name   string
	key    string
	limit  int
	window time.Duration
}

// NewFixedWindow returns a fixed-window limiter of limit requests per
// window (at least 1ms).
func NewFixedWindow(rdb redis.UniversalClient, name string, limit int, window time.Duration) (*FixedWindow, error) {
	if err := checkName("fixed window", name); err != nil {
		return nil, err
	}
	if err := checkLimit("fixed window", name, "limit", limit); err != nil {
		return nil, err
	}
	if err := checkDuration("fixed window", name, "window", window); err != nil {
		return nil, err
	}
	return &FixedWindow{rdb: rdb, name: name, key: key(name, "fw"), limit: limit, window: window.Truncate(time.Millisecond)}, nil
}

// Allow asks to admit one request.
func (f *FixedWindow) Allow(ctx context.Context) (Result, error) { return f.AllowN(ctx, 1) }

// AllowN asks to admit n requests at once (1 <= n <= limit).
func (f *FixedWindow) AllowN(ctx context.Context, n int) (Result, error) {
	if err := checkCost("fixed window", f.name, n, f.limit); err != nil {
		return Result{}, err
	}
	res, err := fixedWindowScript.Run(ctx, f.rdb, []string{f.key}, f.limit, f.window.Milliseconds(), n).Int64Slice()
	if err != nil {
		return Result{}, errtext.Errorf("fixed window %q: %w", f.name, err)
	}
	return Result{Allowed: res[0] == 1, Remaining: int(res[1]),
		RetryAfter: time.Duration(res[2]) * time.Millisecond,
		ResetAfter: time.Duration(res[3]) * time.Millisecond}, nil
}

// Reset forgets the current window's count.
func (f *FixedWindow) Reset(ctx context.Context) error {
	if err := f.rdb.Del(ctx, f.key).Err(); err != nil {
		return errtext.Errorf("fixed window %q: reset: %w", f.name, err)
	}
	return nil
}

// SlidingWindow is a sliding-window log: a ZSET with one member per
// admitted request, scored by its Redis server time in microseconds. A
// request is admitted only if the last window (now−W, now] holds fewer
// than limit requests, so no interval of length W ever holds more than
// limit — there is no boundary burst — and RetryAfter is exact. It costs
// memory and time in O(limit) per key. Key: {name}:sw.
type SlidingWindow struct {
	rdb    redis.UniversalClient
	name   string
	key    string
	limit  int
	window time.Duration
}

// NewSlidingWindow returns a sliding-window limiter of limit requests per
// window (at least 1ms).
func NewSlidingWindow(rdb redis.UniversalClient, name string, limit int, window time.Duration) (*SlidingWindow, error) {
	if err := checkName("sliding window", name); err != nil {
		return nil, err
	}
	if err := checkLimit("sliding window", name, "limit", limit); err != nil {
		return nil, err
	}
	if err := checkDuration("sliding window", name, "window", window); err != nil {
		return nil, err
	}
	return &SlidingWindow{rdb: rdb, name: name, key: key(name, "sw"), limit: limit, window: window.Truncate(time.Microsecond)}, nil
}

// Allow asks to admit one request.
func (s *SlidingWindow) Allow(ctx context.Context) (Result, error) { return s.AllowN(ctx, 1) }

// AllowN asks to admit n requests at once (1 <= n <= limit).
func (s *SlidingWindow) AllowN(ctx context.Context, n int) (Result, error) {
	if err := checkCost("sliding window", s.name, n, s.limit); err != nil {
		return Result{}, err
	}
	res, err := slidingWindowScript.Run(ctx, s.rdb, []string{s.key}, s.limit, s.window.Microseconds(), n).Int64Slice()
	if err != nil {
		return Result{}, errtext.Errorf("sliding window %q: %w", s.name, err)
	}
	return Result{Allowed: res[0] == 1, Remaining: int(res[1]),
		RetryAfter: time.Duration(res[2]) * time.Microsecond,
		ResetAfter: time.Duration(res[3]) * time.Microsecond}, nil
}

// Reset empties the log.
func (s *SlidingWindow) Reset(ctx context.Context) error {
	if err := s.rdb.Del(ctx, s.key).Err(); err != nil {
		return errtext.Errorf("sliding window %q: reset: %w", s.name, err)
	}
	return nil
}

// LeakyBucket is a leaky bucket used as a meter: it lets requests out one
// interval apart. Each request is scheduled at max(now, previous slot +
// interval) on the Redis server clock and admitted if it waits at most
// capacity intervals; the admitted request's Result.Delay says how long
// the caller must wait before it acts. It smooths bursts into an even
// flow instead of rejecting them: a burst of capacity+1 requests is
// admitted at once with delays 0, interval, 2·interval, … A caller that
// is admitted and then does not act wastes its slot. Key: {name}:lb.
type LeakyBucket struct {
	rdb      redis.UniversalClient
	name     string
	key      string
	interval time.Duration
	capacity int
}

// NewLeakyBucket returns a leaky bucket letting one request out per
// interval (at least 1µs) with room for capacity waiting requests (0: no
// waiting, each request is admitted only if its slot is now).
func NewLeakyBucket(rdb redis.UniversalClient, name string, interval time.Duration, capacity int) (*LeakyBucket, error) {
	if err := checkName("leaky bucket", name); err != nil {
		return nil, err
	}
	if interval < time.Microsecond {
		return nil, fmt.Errorf("%w: leaky bucket %q: interval %s is below 1µs", hourglass.ErrInvalidArgument, name, interval)
	}
	if capacity < 0 {
		return nil, fmt.Errorf("%w: leaky bucket %q: capacity %d is negative", hourglass.ErrInvalidArgument, name, capacity)
	}
	return &LeakyBucket{rdb: rdb, name: name, key: key(name, "lb"), interval: interval.Truncate(time.Microsecond), capacity: capacity}, nil
}

// Allow asks to schedule one request.
func (l *LeakyBucket) Allow(ctx context.Context) (Result, error) { return l.AllowN(ctx, 1) }

// AllowN asks to schedule n requests as one: they take n consecutive
// slots, and Delay is when the first may go (the caller spaces the rest
// by the interval, or sends them as one unit of weight n).
func (l *LeakyBucket) AllowN(ctx context.Context, n int) (Result, error) {
	if n < 1 {
		return Result{}, fmt.Errorf("%w: leaky bucket %q: n %d is below 1", hourglass.ErrInvalidArgument, l.name, n)
	}
	res, err := leakyBucketScript.Run(ctx, l.rdb, []string{l.key}, l.interval.Microseconds(), l.capacity, n).Int64Slice()
	if err != nil {
		return Result{}, errtext.Errorf("leaky bucket %q: %w", l.name, err)
	}
	return Result{Allowed: res[0] == 1, Remaining: int(res[1]),
		RetryAfter: time.Duration(res[2]) * time.Microsecond,
		ResetAfter: time.Duration(res[3]) * time.Microsecond,
		Delay:      time.Duration(res[4]) * time.Microsecond}, nil
}

// Reset empties the bucket.
func (l *LeakyBucket) Reset(ctx context.Context) error {
	if err := l.rdb.Del(ctx, l.key).Err(); err != nil {
		return errtext.Errorf("leaky bucket %q: reset: %w", l.name, err)
	}
	return nil
}
