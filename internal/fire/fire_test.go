package fire

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/hourglass-sched/hourglass/internal/owner"
	"github.com/hourglass-sched/hourglass/internal/reshard"
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
// called, with the least misfire grace (MinMisfireGrace): an occurrence
// more than 2 s old is the catch-up policy's.
func run(t *testing.T, e *shardtest.Env, epoch int64, ss ...*periodic.Compiled) (stop func()) {
	return runWith(t, e, epoch, Config{MisfireGrace: MinMisfireGrace}, ss...)
}

// runWith is run with the firer's Config (its Schedules are ss).
func runWith(t *testing.T, e *shardtest.Env, epoch int64, cfg Config, ss ...*periodic.Compiled) (stop func()) {
	cfg.Schedules = ss
	f, err := New(e.Store, cfg)
	if err != nil {
		t.Fatal(err)
	}
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
	// catch_up all: a hand-over slower than the (least) misfire grace on
	// a loaded machine must not make a gap either (skip would, by
	// design).
	c := compile(t, periodic.Schedule{Name: "tick", Queue: "q", Interval: time.Second, CatchUp: periodic.CatchUpAll})
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
			// and the first more than the misfire grace old (so the policy
			// decides, not the hand-over rule).
			c := compile(t, periodic.Schedule{Name: "c", Queue: "q", Interval: 2 * time.Second,
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
			runWith(t, e, 1, Config{MisfireGrace: MinMisfireGrace, Metrics: met}, c)
			// Catching up comes first; the loop then fires the regular
			// occurrences, the first of them after now.
			testenv.WaitFor(t, 10*time.Second, "a regular occurrence after the catch-up", func() (bool, string) {
				st, err := e.Store.LastRecorded(context.Background(), l.HomeShard("c"))
				return err == nil && st["c"].After(now), fmt.Sprint(st, err)
			})
			caught := testutil.ToFloat64(met.caughtUp.WithLabelValues("c"))
			var before []int64 // fired occurrences of the stopped window
			for _, ms := range occurrences(t, e, "c") {
				if ms <= now.UnixMilli() {
					before = append(before, ms)
				}
			}
			checkCatchUpHistory(t, e, policy, before)
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
// whose next occurrence is less than the misfire grace old fires it late,
// also with the policy skip (a SIGTERM hand-over must not lose it).
func TestHandOverFiresLateNotMissed(t *testing.T) {
	t.Parallel()
	e := shardtest.New(t, shardtest.Options{Queues: map[string]shard.QueuePolicy{"q": shardtest.Policy()}})
	c := compile(t, periodic.Schedule{Name: "h", Queue: "q", Interval: time.Second})
	l := e.Layout()
	// The next occurrence is 0.1-1.1 s old: at least 0.9 s to spare
	// before the (least) misfire grace for the firer to start.
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

// TestMisfireGraceDecidesBeforeThePolicy: with the policy skip and the
// default misfire grace (a minute), a new owner that finds the last
// occurrence recorded 20 s ago (its previous owner was SIGKILLed and its
// lease expired meanwhile; a daily job due then would be one of these)
// fires every occurrence since, late, each once; one that finds it 90 s
// ago leaves them to the policy, which skips them.
func TestMisfireGraceDecidesBeforeThePolicy(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		ago   time.Duration
		fired bool
	}{{"within the grace", 20 * time.Second, true}, {"beyond it", 90 * time.Second, false}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := shardtest.New(t, shardtest.Options{Queues: map[string]shard.QueuePolicy{"q": shardtest.Policy()}})
			s := compile(t, periodic.Schedule{Name: "d", Queue: "q", Interval: 5 * time.Second}) // catch_up skip
			l := e.Layout()
			now := time.Now()
			last := s.Next(now.Add(-c.ago))
			if err := e.RDB.HSet(context.Background(), l.Periodic(l.HomeShard("d")), "d", last.UnixMilli()).Err(); err != nil {
				t.Fatal(err)
			}
			var missed []int64
			for o := s.Next(last); !o.After(now); o = s.Next(o) {
				missed = append(missed, o.UnixMilli())
			}
			runWith(t, e, 1, Config{}, s) // the default grace
			testenv.WaitFor(t, 15*time.Second, "an occurrence after the start fired", func() (bool, string) {
				o := occurrences(t, e, "d")
				return len(o) > 0 && o[len(o)-1] > now.UnixMilli(), fmt.Sprint(o)
			})
			o := occurrences(t, e, "d")
			got := slices.DeleteFunc(slices.Clone(o), func(ms int64) bool { return ms > now.UnixMilli() })
			if c.fired && !slices.Equal(got, missed) {
				t.Fatalf("fired %v of the missed occurrences %v: want each once", got, missed)
			}
			if !c.fired && len(got) != 0 {
				t.Fatalf("fired %v of the occurrences missed beyond the grace: the policy skip fires none", got)
			}
		})
	}
}

// TestNewHomeFiresWhileAScheduleAwaitsItsHandOver: during a change of the
// shard count, a schedule registered at run time after its old home was
// recorded done is not handed over in this change; its new home still
// fires its other schedules, also those that do not move. takeOver once
// failed the whole shard's run while any one arriving schedule was not
// handed over: the new home fired none of its schedules until the change
// ended (then catch-up skip dropped what was missed).
func TestNewHomeFiresWhileAScheduleAwaitsItsHandOver(t *testing.T) {
	t.Parallel()
	e := shardtest.New(t, shardtest.Options{Shards: 4, Queues: map[string]shard.QueuePolicy{"q": shardtest.Policy()}})
	ctx := testenv.Ctx(t, time.Minute)
	nameIn := func(prefix string, sh int) string {
		return testenv.IDs(prefix, 1, func(id string) bool { return testenv.ShardOf(id, 4) == sh })[0]
	}
	stay := compile(t, periodic.Schedule{Name: nameIn("stay-", 0), Queue: "q", Interval: time.Second})
	arrive := compile(t, periodic.Schedule{Name: nameIn("arrive-", 2), Queue: "q", Interval: time.Second})

	// A task in flight in shard 3 keeps the change 4 -> 2 open.
	busy := e.IDsIn(3, 1, "busy-")[0]
	e.Ready("q", busy)
	_, entries, err := e.Store.Pop(ctx, []string{e.Layout().Ready(3, "q")}, 1, time.Second)
	if err != nil || len(entries) != 1 {
		t.Fatalf("pop: %v %v", entries, err)
	}
	if ds, err := e.Store.Claim(ctx, 3, "q", entries, time.Minute); err != nil || len(ds) != 1 {
		t.Fatalf("claim: %v %v", ds, err)
	}

	if _, err := e.Store.BeginResize(ctx, 2); err != nil {
		t.Fatal(err)
	}
	f, err := New(e.Store, Config{Schedules: []*periodic.Compiled{stay}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := reshard.New(e.Store, reshard.Config{Retry: 50 * time.Millisecond, Schedules: f.Names})
	if err != nil {
		t.Fatal(err)
	}
	loops := []owner.Loop{{Name: "periodic", Run: f.Run}, {Name: "reshard", Run: m.Run}}
	e.Own(loops...) // shards 0, 1 (Own covers Shards, not Span)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{}, 2)
	t.Cleanup(func() { stop(); <-done; <-done })
	for sh := 2; sh < 4; sh++ {
		go func() {
			_ = owner.Run(rctx, owner.Shard{ID: sh, Epoch: shardtest.Epoch}, loops)
			done <- struct{}{}
		}()
	}
	testenv.WaitFor(t, 10*time.Second, "shard 2 done", func() (bool, string) {
		r, err := e.Store.ReadLayout(ctx)
		return err == nil && slices.Contains(r.Done, 2), fmt.Sprint(r.Done, err)
	})
	testenv.WaitFor(t, 10*time.Second, "stay fires", func() (bool, string) {
		return len(occurrences(t, e, stay.Name)) >= 2, fmt.Sprint(occurrences(t, e, stay.Name))
	})
	// "arrive" is registered at run time (inspect.SetSchedule) now.
	f.SetSchedules([]*periodic.Compiled{stay, arrive})
	before := len(occurrences(t, e, stay.Name))
	testenv.WaitFor(t, 4*time.Second, fmt.Sprintf("%s (home 0, not moving) to fire twice more after %s was registered (the whole shard waits for a hand-over that never comes?)", stay.Name, arrive.Name), func() (bool, string) {
		n := len(occurrences(t, e, stay.Name))
		return n >= before+2, fmt.Sprintf("%d more", n-before)
	})
}

// TestPausedScheduleRecordsWithoutTasks: the occurrences of a paused
// schedule advance its state and create no task.
func TestPausedScheduleRecordsWithoutTasks(t *testing.T) {
	t.Parallel()
	e := shardtest.New(t, shardtest.Options{Queues: map[string]shard.QueuePolicy{"q": shardtest.Policy()}})
	// catch_up all, and occurrences missed since 10 s ago: a paused
	// schedule catches none of them up either.
	c := compile(t, periodic.Schedule{Name: "p", Queue: "q", Interval: time.Second, CatchUp: periodic.CatchUpAll})
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
		st, err := e.Store.LastRecorded(context.Background(), l.HomeShard("p"))
		return err == nil && st["p"].After(now), fmt.Sprint(st, err)
	})
	if o := occurrences(t, e, "p"); len(o) != 0 {
		t.Fatalf("a paused schedule created tasks %v", o)
	}
	// Its history says why, occurrence by occurrence.
	h, err := e.Store.ScheduleHistory(context.Background(), "p", 0)
	if err != nil || len(h) < 9 {
		t.Fatalf("history: %+v %v", h, err)
	}
	for _, o := range h {
		if o.Outcome != shard.OutcomeSkipped || o.Detail != "paused" || o.CaughtUp || o.Count != 1 || !o.At.After(last) {
			t.Fatalf("a paused schedule's history: %+v", o)
		}
	}
}

// checkCatchUpHistory checks schedule "c"'s history after a catch-up by
// policy that fired before (the occurrences before the start, sorted):
// those it fired are marked caught up, and what it skipped is one entry
// counting them.
func checkCatchUpHistory(t *testing.T, e *shardtest.Env, policy periodic.CatchUp, before []int64) {
	t.Helper()
	h, err := e.Store.ScheduleHistory(context.Background(), "c", 0)
	if err != nil {
		t.Fatal(err)
	}
	var caught []int64
	skipped := 0
	for i := len(h) - 1; i >= 0; i-- { // oldest first
		o := h[i]
		switch {
		case o.Outcome == shard.OutcomeFired && o.CaughtUp:
			caught = append(caught, o.At.UnixMilli())
		case o.Outcome == shard.OutcomeSkipped:
			if !strings.Contains(o.Detail, "catch_up "+string(policy)) || o.TaskID != "" || o.CaughtUp {
				t.Fatalf("%s: a skip %+v", policy, o)
			}
			skipped += o.Count
		case o.Outcome != shard.OutcomeFired:
			t.Fatalf("%s: outcome %+v", policy, o)
		}
	}
	t.Logf("%s: history of %d entries, caught up %v, %d skipped by the policy", policy, len(h), caught, skipped)
	if policy != periodic.CatchUpLatest && len(before) > 0 && !slices.Equal(caught, before) || policy == periodic.CatchUpLatest && len(caught) != len(before) {
		t.Fatalf("%s: history caught up %v, the tasks say %v", policy, caught, before)
	}
	switch {
	case policy == periodic.CatchUpAll && skipped != 0,
		policy == periodic.CatchUpSkip && (skipped < 3 || skipped > 5),
		policy == periodic.CatchUpLatest && (skipped < 2 || skipped > 4):
		t.Fatalf("%s: %d skipped by the policy", policy, skipped)
	}
}
