package shard

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/errtext"
)

// Bounds of a queue's cluster-wide flow control, the worker's
// QueueOptions and the limits set at run time alike.
const (
	MaxClusterConcurrency = 100000
	MaxRate               = 1000000
	MaxBurst              = 1000000
	MinRatePeriod         = time.Millisecond
)

// The rate limiters a queue can use (coord's), as configured and stored.
const (
	LimiterTokenBucket   = "token_bucket"
	LimiterSlidingWindow = "sliding_window"
	LimiterFixedWindow   = "fixed_window"
	LimiterLeakyBucket   = "leaky_bucket"
)

// LimiterKinds are the rate limiters a queue can use, the default first.
var LimiterKinds = []string{LimiterTokenBucket, LimiterSlidingWindow, LimiterFixedWindow, LimiterLeakyBucket}

// LimiterProblem checks the rules that tie a queue's rate limiter to its
// rate (period 0 and burst 0 meaning their defaults): a known kind (""
// is the default), no burst above 1 for a window, and a leaky bucket's
// spacing of at least 1µs. It returns the field at fault ("Kind",
// "Burst" or "Rate") and why, or "" when the rules hold. The worker's
// QueueOptions.Validate and QueueLimits.Validate both ask it.
func LimiterProblem(kind string, rate int, period time.Duration, burst int) (field, why string) {
	if period == 0 {
		period = time.Second
	}
	switch {
	case kind != "" && !slices.Contains(LimiterKinds, kind):
		return "Kind", fmt.Sprintf("%q is not one of %s", kind, strings.Join(LimiterKinds, ", "))
	case (kind == LimiterSlidingWindow || kind == LimiterFixedWindow) && burst > 1:
		return "Burst", fmt.Sprintf("%d has no meaning for a %s: the window's rate is its burst (0 or 1)", burst, kind)
	case kind == LimiterLeakyBucket && rate > 0 && period/time.Duration(rate) < time.Microsecond:
		return "Rate", fmt.Sprintf("%d per %s spaces starts less than 1µs apart, the least a leaky bucket keeps", rate, period)
	}
	return "", ""
}

// QueueLimits is a queue's cluster-wide flow control set at run time
// (inspect.SetQueueLimits, hourglass queue limit): while it is set it
// replaces, in every worker that consumes the queue under flow control,
// the limits of the worker's own configuration, all of them (a zero
// field is off or the default, as in worker.QueueOptions). Stored as JSON
// in field "|lim|<queue>" of the paused hash.
type QueueLimits struct {
	// MaxConcurrency caps the queue's handlers running at once across
	// the workers; 0: no cap.
	MaxConcurrency int
	// Rate caps handler starts to Rate per Period (default 1s) by Kind
	// (default token_bucket) with Burst (default 1); 0: no rate limit.
	Rate   int
	Period time.Duration
	Burst  int
	Kind   string
}

// limitsJSON is QueueLimits as stored: the period in whole ms.
type limitsJSON struct {
	MaxConcurrency int    `json:"max_concurrency,omitempty"`
	Rate           int    `json:"rate,omitempty"`
	PeriodMs       int64  `json:"period_ms,omitempty"`
	Burst          int    `json:"burst,omitempty"`
	Kind           string `json:"kind,omitempty"`
}

// MarshalJSON stores l as {"max_concurrency", "rate", "period_ms",
// "burst", "kind"}, each left out when zero.
func (l QueueLimits) MarshalJSON() ([]byte, error) {
	return json.Marshal(limitsJSON{l.MaxConcurrency, l.Rate, l.Period.Milliseconds(), l.Burst, l.Kind})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (l *QueueLimits) UnmarshalJSON(b []byte) error {
	var w limitsJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*l = QueueLimits{w.MaxConcurrency, w.Rate, time.Duration(w.PeriodMs) * time.Millisecond, w.Burst, w.Kind}
	return nil
}

// Validate reports the first limit out of its bounds, wrapping
// ErrInvalidArgument (the worker's QueueOptions.Validate has the same
// rules, field by field).
func (l QueueLimits) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: queue limits: "+format, append([]any{ErrInvalidArgument}, args...)...)
	}
	switch {
	case l.MaxConcurrency < 0 || l.MaxConcurrency > MaxClusterConcurrency:
		return bad("max concurrency %d not in 0..%d", l.MaxConcurrency, MaxClusterConcurrency)
	case l.Rate < 0 || l.Rate > MaxRate:
		return bad("rate %d not in 0..%d", l.Rate, MaxRate)
	case l.Period < 0 || (l.Period != 0 && l.Period < MinRatePeriod) || l.Period%time.Millisecond != 0:
		return bad("period %s: a whole number of ms, at least %s (0: the default)", l.Period, MinRatePeriod)
	case l.Burst < 0 || l.Burst > MaxBurst:
		return bad("burst %d not in 0..%d", l.Burst, MaxBurst)
	}
	if field, why := LimiterProblem(l.Kind, l.Rate, l.Period, l.Burst); field != "" {
		return bad("%s %s", strings.ToLower(field), why)
	}
	return nil
}

// String says what l asks for, defaults spelled out: "at most 5 running;
// 50 per 1s by token_bucket, burst 10" (the CLI's words).
func (l QueueLimits) String() string {
	var parts []string
	if l.MaxConcurrency > 0 {
		parts = append(parts, fmt.Sprintf("at most %d running", l.MaxConcurrency))
	}
	if l.Rate > 0 {
		period, kind, burst := l.Period, l.Kind, max(l.Burst, 1)
		if period == 0 {
			period = time.Second
		}
		if kind == "" {
			kind = LimiterTokenBucket
		}
		parts = append(parts, fmt.Sprintf("%d per %s by %s, burst %d", l.Rate, period, kind, burst))
	}
	if len(parts) == 0 {
		return "no cap and no rate limit"
	}
	return strings.Join(parts, "; ")
}

// limitField is the paused hash's field of queue's limits.
func limitField(queue string) string { return "|lim|" + queue }

// SetQueueLimits sets queue's limits (nil clears them) for the
// deployment and announces it on the control channel; it reports whether
// they changed.
func (s *Store) SetQueueLimits(ctx context.Context, queue string, l *QueueLimits) (bool, error) {
	if !ValidQueue(queue) {
		return false, fmt.Errorf("%w: queue name %q", ErrInvalidArgument, queue)
	}
	if l == nil {
		return s.control(ctx, "unlimit", queue, nil, "set the limits")
	}
	if err := l.Validate(); err != nil {
		return false, err
	}
	return s.control(ctx, "limit", queue, l, "set the limits")
}

// control runs pause.lua's op on queue with v as JSON (nil: none) and
// reports whether it changed the paused hash; what names the change in
// its error.
func (s *Store) control(ctx context.Context, op, queue string, v any, what string) (bool, error) {
	args := []any{op, queue, s.k.ControlChannel()}
	if v != nil {
		b, err := json.Marshal(v)
		if err != nil {
			return false, err
		}
		args = append(args, string(b))
	}
	n, err := pauseScript.Run(ctx, s.rdb, []string{s.k.Paused()}, args...).Int64()
	if err != nil {
		return false, errtext.Errorf("%s of queue %q: %w", what, queue, err)
	}
	return n == 1, nil
}

// Controls is what the paused hash holds: the paused queues (and when
// each was paused), and the limits set at run time.
type Controls struct {
	Paused map[string]time.Time
	Limits map[string]QueueLimits
	// BadLimits holds, by queue, why limits set at run time could not be
	// used (they do not decode or validate: written by a newer release,
	// or by hand); they are left out of Limits.
	BadLimits map[string]error
	// Routes holds the queues' routings set at run time (SetRouting); a
	// queue without one admits every worker. BadRoutes holds, by queue,
	// why a stored routing could not be used: a worker then takes none
	// of the queue's tasks, as the routing may have excluded it.
	Routes    map[string]Routing
	BadRoutes map[string]error
}

// Controls reads the paused hash in one HGETALL.
func (s *Store) Controls(ctx context.Context) (Controls, error) {
	m, err := s.rdb.HGetAll(ctx, s.k.Paused()).Result()
	if err != nil && err != redis.Nil {
		return Controls{}, errtext.Errorf("read paused queues: %w", err)
	}
	c := Controls{Paused: map[string]time.Time{}, Limits: map[string]QueueLimits{}, BadLimits: map[string]error{},
		Routes: map[string]Routing{}, BadRoutes: map[string]error{}}
	for field, v := range m {
		if q, ok := strings.CutPrefix(field, "|route|"); ok {
			if r, err := parseRouting(v); err != nil {
				c.BadRoutes[q] = err
			} else {
				c.Routes[q] = r
			}
			continue
		}
		if q, ok := strings.CutPrefix(field, "|lim|"); ok {
			var l QueueLimits
			err := json.Unmarshal([]byte(v), &l)
			if err == nil {
				err = l.Validate()
			}
			if err != nil {
				c.BadLimits[q] = err
			} else {
				c.Limits[q] = l
			}
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		c.Paused[field] = time.UnixMilli(n)
	}
	return c, nil
}
