package worker

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hourglass-sched/hourglass/coord"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// Every limiter a queue can use holds its rate across worker processes:
// two workers share a queue, a spell of ready tasks exceeds the limit,
// and the handlers' starts keep to what the limiter promises.
func TestEveryLimiterHoldsTheQueueRate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		opts  QueueOptions
		want  coord.Limiter // the type of limiter the queue must get
		check func(t *testing.T, starts []time.Time) float64
	}{
		{QueueOptions{Rate: 4, Burst: 2, Limiter: TokenBucket}, &coord.TokenBucket{}, func(t *testing.T, s []time.Time) float64 { return checkRate(t, s, 4, 2) }},
		// One start per 200 ms, evenly: a bucket of burst 1.
		{QueueOptions{Rate: 5, Burst: 1, Limiter: LeakyBucket}, &coord.LeakyBucket{}, func(t *testing.T, s []time.Time) float64 { return checkRate(t, s, 5, 1) }},
		{QueueOptions{Rate: 3, Limiter: SlidingWindow}, &coord.SlidingWindow{}, func(t *testing.T, s []time.Time) float64 { return checkSliding(t, s, 3, time.Second) }},
		{QueueOptions{Rate: 3, Limiter: FixedWindow}, &coord.FixedWindow{}, func(t *testing.T, s []time.Time) float64 { return checkFixed(t, s, 3, time.Second) }},
	} {
		t.Run(string(c.opts.Limiter), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, shardtest.Policy())
			var mu sync.Mutex
			var starts []time.Time
			h := func(context.Context, *Task) error {
				mu.Lock()
				starts = append(starts, time.Now())
				mu.Unlock()
				return nil
			}
			c.opts.Concurrency = 4
			w, _, _ := e.start(e.RDB, c.opts, h)
			e.start(e.RDB, c.opts, h)
			if got := w.queues["q"].limit.Load().Limiter; reflect.TypeOf(got) != reflect.TypeOf(c.want) {
				t.Fatalf("limiter %s made a %T, want a %T", c.opts.Limiter, got, c.want)
			}
			const n = 9
			ids := make([]string, n)
			for i := range ids {
				ids[i] = fmt.Sprintf("t%d", i)
			}
			e.Schedule("q", 0, ids...)
			testenv.WaitFor(t, 30*time.Second, "every task started", func() (bool, string) {
				mu.Lock()
				defer mu.Unlock()
				return len(starts) == n, fmt.Sprint(len(starts))
			})
			mu.Lock()
			defer mu.Unlock()
			worst := c.check(t, starts)
			t.Logf("%d starts on two workers, %d per %s by %s: spread over %v; worst window held %.2f of its allowance",
				n, c.opts.Rate, DefaultRatePeriod, c.opts.Limiter, starts[n-1].Sub(starts[0]).Round(time.Millisecond), worst)
		})
	}
}

// checkSliding fails t if a window shorter than period holds more than
// limit starts. A start comes at most slack after its admission (as in
// checkRate: 0.8 of the interval limit/period allows on average), so
// starts less than period − slack apart were admitted less than period
// apart. It returns the largest count / limit seen in such windows.
func checkSliding(t *testing.T, starts []time.Time, limit int, period time.Duration) float64 {
	t.Helper()
	slack := time.Duration(0.8 * float64(period) / float64(limit))
	worst := 0.0
	for i := range starts {
		for j := i; j < len(starts); j++ {
			span := starts[j].Sub(starts[i])
			if span+slack >= period {
				break
			}
			count := j - i + 1
			worst = max(worst, float64(count)/float64(limit))
			if count > limit {
				t.Errorf("starts %d..%d (%d) within %v: more than %d in a window of %v", i, j, count, span.Round(time.Millisecond), limit, period)
			}
		}
	}
	return worst
}

// checkFixed fails t if a window [k·period, (k+1)·period) of the clock
// (Redis's is this machine's) holds more than limit starts, leaving out
// the starts in its first slack, which its predecessor may have
// admitted; and if the starts span fewer windows than len(starts)/limit
// need (the first start counted from slack earlier: it may have been
// admitted then). It returns the largest count / limit seen.
func checkFixed(t *testing.T, starts []time.Time, limit int, period time.Duration) float64 {
	t.Helper()
	slack := time.Duration(0.8 * float64(period) / float64(limit))
	window := func(t time.Time) int64 { return t.UnixNano() / int64(period) }
	first, last := slices.MinFunc(starts, time.Time.Compare), slices.MaxFunc(starts, time.Time.Compare)
	if span, need := window(last)-window(first.Add(-slack)), int64((len(starts)+limit-1)/limit-1); span < need {
		t.Errorf("%d starts over %d windows of %v after the first: %d per window allow no fewer than %d", len(starts), span, period, limit, need)
	}
	counts := map[int64]int{}
	for _, s := range starts {
		if time.Duration(s.UnixNano()%int64(period)) >= slack {
			counts[s.UnixNano()/int64(period)]++
		}
	}
	worst := 0.0
	for k, count := range counts {
		worst = max(worst, float64(count)/float64(limit))
		if count > limit {
			t.Errorf("window %d of %v: %d starts after its first %v, more than %d", k, period, count, slack.Round(time.Millisecond), limit)
		}
	}
	return worst
}

// QueueOptions.Validate refuses a limiter it does not know, a burst
// given to a window limiter, and a leaky bucket spacing starts below
// 1µs; each error names the field and wraps ErrInvalidConfig.
func TestLimiterOptionsValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		opts  QueueOptions
		field string
	}{
		{QueueOptions{Rate: 10, Limiter: "gcra"}, "Limiter"},
		{QueueOptions{Rate: 10, Burst: 5, Limiter: SlidingWindow}, "Burst"},
		{QueueOptions{Rate: 10, Burst: 2, Limiter: FixedWindow}, "Burst"},
		{QueueOptions{Rate: MaxRate, RatePeriod: 100 * time.Millisecond, Limiter: LeakyBucket}, "Rate"},
	} {
		err := c.opts.Validate()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%+v: error %v, want one naming %s", c.opts, err, c.field)
		}
	}
	// A leaky bucket keeps µs: its spacing is rounded up, never down
	// (1.67µs down to 1µs would run at 1,000,000/s instead of 600,000).
	if d := leakInterval(QueueOptions{Rate: 600000}); d != 2*time.Microsecond {
		t.Errorf("600000 per second spaced %v apart, want 2µs", d)
	}
	for _, k := range append(LimiterKinds(), "") {
		o := QueueOptions{Rate: 10, Burst: 1, Limiter: k}
		if err := o.Validate(); err != nil {
			t.Errorf("%+v: %v", o, err)
		}
		if got := o.withDefaults().Limiter; got == "" || (k != "" && got != k) {
			t.Errorf("limiter %q becomes %q with the defaults", k, got)
		}
	}
}

// Limits set at run time (Store.SetQueueLimits, as inspect and the CLI
// set them) replace the queue's own at once, hold, and give way to them
// again when cleared.
func TestLimitsSetAtRunTime(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardtest.Policy())
	ctx := testenv.Ctx(t, time.Minute)
	var mu sync.Mutex
	var starts []time.Time
	w, _, _ := e.start(e.RDB, QueueOptions{Concurrency: 4, Rate: 1000, Burst: 1000}, func(context.Context, *Task) error {
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		return nil
	})
	q := w.queues["q"]
	own := q.limit.Load()
	applied := func(what string, from *limiterRef) {
		t.Helper()
		set := time.Now()
		testenv.WaitFor(t, 10*time.Second, what, func() (bool, string) { return q.limit.Load() != from, "" })
		t.Logf("%s: applied %v after the write", what, time.Since(set).Round(time.Millisecond))
	}
	run := func(prefix string, n int) []time.Time {
		t.Helper()
		mu.Lock()
		from := len(starts)
		mu.Unlock()
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("%s%d", prefix, i)
		}
		e.Schedule("q", 0, ids...)
		testenv.WaitFor(t, 10*time.Second, prefix+" tasks started", func() (bool, string) {
			mu.Lock()
			defer mu.Unlock()
			return len(starts)-from == n, fmt.Sprint(len(starts) - from)
		})
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(starts[from:])
	}
	if _, err := e.Store.SetQueueLimits(ctx, "q", &shard.QueueLimits{Rate: 2, Burst: 1}); err != nil {
		t.Fatal(err)
	}
	applied("2 per second set", own)
	set := q.limit.Load()
	checkRate(t, run("slow", 6), 2, 1)
	if _, err := e.Store.SetQueueLimits(ctx, "q", nil); err != nil {
		t.Fatal(err)
	}
	applied("cleared", set)
	// 40 tasks: 20 s at 2 per second, well beyond run's deadline.
	run("fast", 40)
}

// A change of the limits reaches the admissions that wait under the old
// ones: a task waiting for a slow bucket's next token starts once faster
// limits are set (a fresh bucket: the slow one's schedule is not
// inherited), one waiting for a permit starts once the cap is raised,
// and a leaky bucket's task admitted ahead of its turn still waits for
// it.
func TestLimitsChangeWakesWaitingAdmissions(t *testing.T) {
	t.Parallel()
	type started struct {
		mu sync.Mutex
		at map[string]time.Time
	}
	type run struct {
		*env
		s   *started
		q   *queue
		reg *prometheus.Registry
		ctx context.Context
	}
	setup := func(t *testing.T, opts QueueOptions, block map[string]chan struct{}) run {
		e := newEnv(t, shardtest.Policy())
		s := &started{at: map[string]time.Time{}}
		opts.Concurrency = 4
		w, reg, _ := e.start(e.RDB, opts, func(ctx context.Context, task *Task) error {
			s.mu.Lock()
			s.at[task.ID] = time.Now()
			s.mu.Unlock()
			if c := block[task.ID]; c != nil {
				<-c
			}
			return nil
		})
		return run{e, s, w.queues["q"], reg, testenv.Ctx(t, time.Minute)}
	}
	waitStart := func(t *testing.T, s *started, id string, within time.Duration) time.Time {
		t.Helper()
		testenv.WaitFor(t, within, id+" started", func() (bool, string) {
			s.mu.Lock()
			defer s.mu.Unlock()
			_, ok := s.at[id]
			return ok, ""
		})
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.at[id]
	}
	// waiting waits until b waits for its admission, as the metric (a
	// counter) or, with none, its state says, and checks that it has not
	// started.
	waiting := func(t *testing.T, r run, id, metric string) {
		t.Helper()
		testenv.WaitFor(t, 10*time.Second, id+" waits for its admission", func() (bool, string) {
			if metric != "" {
				return counter(t, r.reg, metric) >= 1, ""
			}
			info, err := r.Lookup(id)
			return err == nil && info.State == "active", info.State
		})
		r.s.mu.Lock()
		defer r.s.mu.Unlock()
		if _, ok := r.s.at[id]; ok {
			t.Fatalf("%s started before the change", id)
		}
	}
	t.Run("rate", func(t *testing.T) {
		t.Parallel()
		r := setup(t, QueueOptions{Rate: 1000, Burst: 1000}, nil)
		own := r.q.limit.Load()
		if _, err := r.Store.SetQueueLimits(r.ctx, "q", &shard.QueueLimits{Rate: 1, Period: 20 * time.Second}); err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, 10*time.Second, "the slow limits applied", func() (bool, string) {
			return r.q.limit.Load() != own, ""
		})
		r.Schedule("q", 0, "a")
		waitStart(t, r.s, "a", 10*time.Second)
		r.Schedule("q", 0, "b") // its token is 20 s away
		waiting(t, r, "b", "hourglass_worker_throttled_total")
		if _, err := r.Store.SetQueueLimits(r.ctx, "q", &shard.QueueLimits{Rate: 100}); err != nil {
			t.Fatal(err)
		}
		waitStart(t, r.s, "b", 10*time.Second)
	})
	t.Run("cap", func(t *testing.T) {
		t.Parallel()
		hold := make(chan struct{})
		defer close(hold)
		r := setup(t, QueueOptions{MaxConcurrency: 1}, map[string]chan struct{}{"a": hold})
		r.Schedule("q", 0, "a")
		waitStart(t, r.s, "a", 10*time.Second)
		r.Schedule("q", 0, "b") // a holds the one permit
		waiting(t, r, "b", "hourglass_worker_permit_waits_total")
		if _, err := r.Store.SetQueueLimits(r.ctx, "q", &shard.QueueLimits{MaxConcurrency: 2}); err != nil {
			t.Fatal(err)
		}
		waitStart(t, r.s, "b", 10*time.Second)
	})
	t.Run("leaky turn", func(t *testing.T) {
		t.Parallel()
		opts := QueueOptions{Rate: 1, RatePeriod: 3 * time.Second, Burst: 2, Limiter: LeakyBucket}
		r := setup(t, opts, nil)
		r.Schedule("q", 0, "a")
		a := waitStart(t, r.s, "a", 10*time.Second)
		r.Schedule("q", 0, "b") // admitted for a's slot + 3 s
		waiting(t, r, "b", "")
		if _, err := r.Store.SetQueueLimits(r.ctx, "q", &shard.QueueLimits{MaxConcurrency: 5, Rate: 1, Period: 3 * time.Second, Burst: 2, Kind: "leaky_bucket"}); err != nil {
			t.Fatal(err)
		}
		if gap := waitStart(t, r.s, "b", 10*time.Second).Sub(a); gap < 2500*time.Millisecond {
			t.Fatalf("b started %v after a: the change cut its booked turn (3 s) short", gap)
		}
	})
}
