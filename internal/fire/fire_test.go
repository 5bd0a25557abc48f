package fire

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/hourglass-sched/hourglass/internal/owner"
	"github.com/hourglass-sched/hourglass/internal/promread"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
	"github.com/hourglass-sched/hourglass/periodic"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func compile(t *testing.T, s periodic.Schedule) *periodic.Compiled {
	t.Helper()
	c, err := s.Compile()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// occurrences returns the occurrence times (unix ms) of the tasks of
// schedule name stored in its home shard, sorted.
func occurrences(t *testing.T, e *shardtest.Env, name string) []int64 {
	t.Helper()
	l := e.Layout()
	ids, err := e.RDB.HKeys(context.Background(), l.Tasks(l.HomeShard(name))).Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, id := range ids {
		rest, ok := strings.CutPrefix(id, name+"@")
		if !ok {
			continue
		}
		rest, _, _ = strings.Cut(rest, "~")
		var ms int64
		if _, err := fmt.Sscan(rest, &ms); err != nil {
			t.Fatalf("task id %q", id)
		}
		out = append(out, ms)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// run runs a Firer for every shard with epoch until the returned stop is
// called.
func run(t *testing.T, e *shardtest.Env, epoch int64, ss ...*periodic.Compiled) (stop func()) {
	return runWith(t, e, epoch, nil, ss...)
}

// runWith is run with the firer's metrics.
func runWith(t *testing.T, e *shardtest.Env, epoch int64, met *Metrics, ss ...*periodic.Compiled) (stop func()) {
	f := New(e.Store, Config{Schedules: ss, Metrics: met})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	n := e.Layout().Shards()
	go func() {
		defer close(done)
		errs := make(chan error, n)
		for sh := range n {
			go func() { errs <- f.Run(ctx, owner.Shard{ID: sh, Epoch: epoch}) }()
		}
		for range n {
			<-errs
		}
	}()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}

// TestFiresEveryOccurrenceOnce: a 1 s schedule fires each occurrence
// once, each task due at its occurrence, with two owners of the shard
// firing at once (the older fenced out), and a third that takes over
// after both stopped: no gap, no duplicate.
func TestFiresEveryOccurrenceOnce(t *testing.T) {
	t.Parallel()
	e := shardtest.New(t, shardtest.Options{Queues: map[string]shard.QueuePolicy{"q": shardtest.Policy()}})
	// catch_up all: a hand-over slower than MissedAfter on a loaded
	// machine must not make a gap either (skip would, by design).
	c := compile(t, periodic.Schedule{Name: "tick", Queue: "q", Interval: time.Second, MaxRetries: -1, CatchUp: periodic.CatchUpAll})
	start := time.Now()
	stopA := run(t, e, 1, c)
	stopB := run(t, e, 2, c)
	testenv.WaitFor(t, 10*time.Second, "three occurrences", func() (bool, string) {
		o := occurrences(t, e, "tick")
		return len(o) >= 3, fmt.Sprint(o)
	})
	stopA()
	stopB()
	run(t, e, 3, c)
	testenv.WaitFor(t, 10*time.Second, "two more after the hand-over", func() (bool, string) {
		o := occurrences(t, e, "tick")
		return len(o) >= 5, fmt.Sprint(o)
	})
	o := occurrences(t, e, "tick")
	for i := 1; i < len(o); i++ {
		if o[i]-o[i-1] != 1000 {
			t.Fatalf("occurrences %v: a gap or a duplicate between %d and %d", o, o[i-1], o[i])
		}
	}
	if first := time.UnixMilli(o[0]); first.Before(start) || first.After(start.Add(2*time.Second)) {
		t.Fatalf("the first occurrence %v is not the first after the start %v", first, start)
	}
	info, err := e.Lookup(e.Layout().OccurrenceID("tick", time.UnixMilli(o[len(o)-1])))
	if err != nil || !info.At.Equal(time.UnixMilli(o[len(o)-1])) {
		t.Fatalf("the last occurrence's task: %+v %v", info, err)
	}
}

// TestCatchUpPolicies: a schedule whose last occurrence was 10.5 s ago
// fires nothing missed with skip, the latest missed with latest, and the
// ones within its window with all, each at once.
func TestCatchUpPolicies(t *testing.T) {
	t.Parallel()
	for _, policy := range []periodic.CatchUp{periodic.CatchUpSkip, periodic.CatchUpLatest, periodic.CatchUpAll} {
		t.Run(string(policy), func(t *testing.T) {
			t.Parallel()
			e := shardtest.New(t, shardtest.Options{Queues: map[string]shard.QueuePolicy{"q": shardtest.Policy()}})
			// Every 2 s, the last recorded 7.5-9.5 s ago: 3 to 5 missed
			// occurrences, all within the window (so "all" fires each),
			// and the first more than MissedAfter old (so the policy
			// decides, not the hand-over rule).
			c := compile(t, periodic.Schedule{Name: "c", Queue: "q", Interval: 2 * time.Second, MaxRetries: -1,
				CatchUp: policy, CatchUpWindow: time.Minute})
			l := e.Layout()
			now := time.Now()
			last := c.Next(now.Add(-9500 * time.Millisecond))
			if err := e.RDB.HSet(context.Background(), l.Periodic(l.HomeShard("c")), "c", last.UnixMilli()).Err(); err != nil {
				t.Fatal(err)
			}
			missed := c.Missed(last, now) // as of now; the firer starts a little later
			if policy == periodic.CatchUpAll && (len(missed) < 3 || len(missed) > 5) {
				t.Fatalf("the test's own arithmetic: %d missed %v", len(missed), missed)
			}
			met := NewMetrics(prometheus.NewRegistry())
			runWith(t, e, 1, met, c)
			// Catching up comes first; the loop then fires the regular
			// occurrences, the first of them after now.
			testenv.WaitFor(t, 10*time.Second, "a regular occurrence after the catch-up", func() (bool, string) {
				st, err := e.Store.LastFired(context.Background(), l.HomeShard("c"))
				return err == nil && st["c"].After(now), fmt.Sprint(st, err)
			})
			caught := testutil.ToFloat64(met.caughtUp.WithLabelValues("c"))
			var before []int64 // fired occurrences of the stopped window
			for _, ms := range occurrences(t, e, "c") {
				if ms <= now.UnixMilli() {
					before = append(before, ms)
				}
			}
			switch policy {
			case periodic.CatchUpSkip:
				if caught != 0 || len(before) != 0 {
					t.Fatalf("skip caught up %v: %v", caught, before)
				}
			case periodic.CatchUpLatest:
				// The latest missed when the firer started: the last of
				// the window, or one that occurred just after now.
				if caught != 1 || len(before) > 1 || len(before) == 1 && before[0] != missed[len(missed)-1].UnixMilli() {
					t.Fatalf("latest caught up %v: %v (missed as of the start %v)", caught, before, missed)
				}
			case periodic.CatchUpAll:
				if int(caught) < len(missed) || len(before) != len(missed) {
					t.Fatalf("all caught up %v: %v, want every one of %v", caught, before, missed)
				}
			}
		})
	}
}

// TestHandOverFiresLateNotMissed: an owner that takes over a schedule
// whose next occurrence is less than MissedAfter old fires it late, also
// with the policy skip (a SIGTERM hand-over must not lose it).
func TestHandOverFiresLateNotMissed(t *testing.T) {
	t.Parallel()
	e := shardtest.New(t, shardtest.Options{Queues: map[string]shard.QueuePolicy{"q": shardtest.Policy()}})
	c := compile(t, periodic.Schedule{Name: "h", Queue: "q", Interval: time.Second, MaxRetries: -1})
	l := e.Layout()
	// The next occurrence is 0.1-1.1 s old: at least 0.9 s to spare
	// before MissedAfter for the firer to start.
	late := c.Next(time.Now().Add(-1100 * time.Millisecond))
	last := late.Add(-time.Second)
	if err := e.RDB.HSet(context.Background(), l.Periodic(l.HomeShard("h")), "h", last.UnixMilli()).Err(); err != nil {
		t.Fatal(err)
	}
	run(t, e, 1, c)
	testenv.WaitFor(t, 10*time.Second, "the late occurrence fired", func() (bool, string) {
		o := occurrences(t, e, "h")
		return len(o) > 0 && o[0] == late.UnixMilli(), fmt.Sprintf("%v, want %d first", o, late.UnixMilli())
	})
}

// TestPausedScheduleRecordsWithoutTasks: the occurrences of a paused
// schedule advance its state and create no task.
func TestPausedScheduleRecordsWithoutTasks(t *testing.T) {
	t.Parallel()
	e := shardtest.New(t, shardtest.Options{Queues: map[string]shard.QueuePolicy{"q": shardtest.Policy()}})
	// catch_up all, and occurrences missed since 10 s ago: a paused
	// schedule catches none of them up either.
	c := compile(t, periodic.Schedule{Name: "p", Queue: "q", Interval: time.Second, MaxRetries: -1, CatchUp: periodic.CatchUpAll})
	l := e.Layout()
	now := time.Now()
	last := c.Next(now.Add(-10 * time.Second))
	if err := e.RDB.HSet(context.Background(), l.Periodic(l.HomeShard("p")), "p", last.UnixMilli()).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Store.PauseSchedule(context.Background(), "p", true); err != nil {
		t.Fatal(err)
	}
	run(t, e, 1, c)
	testenv.WaitFor(t, 10*time.Second, "an occurrence after the start recorded", func() (bool, string) {
		st, err := e.Store.LastFired(context.Background(), l.HomeShard("p"))
		return err == nil && st["p"].After(now), fmt.Sprint(st, err)
	})
	if o := occurrences(t, e, "p"); len(o) != 0 {
		t.Fatalf("a paused schedule created tasks %v", o)
	}
}

// TestEveryFamilyBeforeTheFirstOccurrence reads /metrics of a replica
// that owns a schedule's home shard before the schedule's first
// occurrence: every periodic family is there, its counters at zero (each
// skip reason too) and its last occurrence 0 (none yet), so a dashboard
// or alert on them finds a series from the start.
func TestEveryFamilyBeforeTheFirstOccurrence(t *testing.T) {
	t.Parallel()
	e := shardtest.New(t, shardtest.Options{Queues: map[string]shard.QueuePolicy{"q": shardtest.Policy()}})
	// An occurrence every 1,000 hours: none during the test.
	c := compile(t, periodic.Schedule{Name: "rare", Queue: "q", Interval: 1000 * time.Hour, MaxRetries: -1})
	reg := prometheus.NewRegistry()
	runWith(t, e, 1, NewMetrics(reg), c)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	ctx := testenv.Ctx(t, 10*time.Second)
	var fams map[string]*dto.MetricFamily
	testenv.WaitFor(t, 5*time.Second, "the owner's loop to plan the next occurrence", func() (bool, string) {
		var err error
		if fams, err = promread.Families(ctx, srv.URL+"/metrics"); err != nil {
			return false, err.Error()
		}
		_, ok := fams["hourglass_periodic_next_occurrence_timestamp_seconds"]
		return ok, "no next occurrence yet"
	})
	for _, name := range []string{
		"hourglass_periodic_fired_total", "hourglass_periodic_skipped_total", "hourglass_periodic_caught_up_total",
		"hourglass_periodic_fire_lateness_seconds", "hourglass_periodic_last_occurrence_timestamp_seconds",
		"hourglass_periodic_errors_total",
	} {
		if fams[name] == nil {
			t.Errorf("%s is not exported before the first occurrence", name)
		}
	}
	if f := fams["hourglass_periodic_skipped_total"]; f != nil && len(f.GetMetric()) != 4 {
		t.Errorf("skipped_total has %d series, want one per reason: %v", len(f.GetMetric()), f.GetMetric())
	}
	for _, name := range []string{"hourglass_periodic_fired_total", "hourglass_periodic_caught_up_total", "hourglass_periodic_last_occurrence_timestamp_seconds"} {
		if f := fams[name]; f != nil && (len(f.GetMetric()) != 1 || f.GetMetric()[0].GetCounter().GetValue()+f.GetMetric()[0].GetGauge().GetValue() != 0) {
			t.Errorf("%s: %v, want one series at 0", name, f.GetMetric())
		}
	}
	if occurrences(t, e, "rare") != nil {
		t.Fatal("the schedule fired during the test")
	}
}
