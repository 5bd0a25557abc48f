package fire

import (
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/hourglass-sched/hourglass/internal/owner"
	"github.com/hourglass-sched/hourglass/internal/promread"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
	"github.com/hourglass-sched/hourglass/periodic"
)

// TestGaugesLeaveWithTheSchedule: a replica exports a schedule's next
// and last occurrence while it owns the schedule's home shard, and drops
// them when it stops firing it (the shard lost or handed over, the
// schedule moved or removed): its new owner exports them, and a stale copy
// here would disagree.
func TestGaugesLeaveWithTheSchedule(t *testing.T) {
	t.Parallel()
	e := shardtest.New(t, shardtest.Options{Queues: map[string]shard.QueuePolicy{"q": shardtest.Policy()}})
	c := compile(t, periodic.Schedule{Name: "g", Queue: "q", Interval: time.Second})
	met := NewMetrics(nil)
	gauges := func() int { return testutil.CollectAndCount(met.next) + testutil.CollectAndCount(met.last) }
	stop := runWith(t, e, 1, Config{Metrics: met}, c)
	testenv.WaitFor(t, 10*time.Second, "both gauges exported", func() (bool, string) {
		return gauges() == 2 && len(occurrences(t, e, "g")) > 0, fmt.Sprint(gauges(), " series")
	})
	stop() // the shard is lost
	if n := gauges(); n != 0 {
		t.Fatalf("%d series left after the shard was lost, want none", n)
	}

	// A schedule removed (or moved to a shard another replica owns) while
	// the loop runs: its series go, the others stay.
	d := compile(t, periodic.Schedule{Name: "d", Queue: "q", Interval: time.Second})
	f, err := New(e.Store, Config{Schedules: []*periodic.Compiled{c, d}, Metrics: met})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	l := e.Layout()
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for _, sh := range slices.Compact([]int{l.HomeShard("g"), l.HomeShard("d")}) {
			wg.Add(1)
			go func() { defer wg.Done(); _ = f.Run(ctx, owner.Shard{ID: sh, Epoch: 2}) }()
		}
		wg.Wait()
	}()
	testenv.WaitFor(t, 10*time.Second, "four series", func() (bool, string) { return gauges() == 4, fmt.Sprint(gauges()) })
	f.SetSchedules([]*periodic.Compiled{c})
	testenv.WaitFor(t, 10*time.Second, "d's series gone, g's kept", func() (bool, string) {
		return gauges() == 2 && testutil.CollectAndCount(met.last, "hourglass_periodic_last_occurrence_timestamp_seconds") == 1, fmt.Sprint(gauges())
	})
	if v := testutil.ToFloat64(met.next.WithLabelValues("g")); v == 0 {
		t.Fatal("g's next occurrence is gone")
	}
	cancel()
	<-done
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
	c := compile(t, periodic.Schedule{Name: "rare", Queue: "q", Interval: 1000 * time.Hour})
	reg := prometheus.NewRegistry()
	runWith(t, e, 1, Config{Metrics: NewMetrics(reg)}, c)
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
