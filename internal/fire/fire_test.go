package fire

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/owner"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
	"github.com/hourglass-sched/hourglass/periodic"
	"go.uber.org/goleak"
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
	f := New(e.Store, Config{Schedules: ss})
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
	c := compile(t, periodic.Schedule{Name: "tick", Queue: "q", Interval: time.Second, MaxRetries: -1})
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
	for _, tc := range []struct {
		policy periodic.CatchUp
		want   int
	}{{periodic.CatchUpSkip, 0}, {periodic.CatchUpLatest, 1}, {periodic.CatchUpAll, 5}} {
		t.Run(string(tc.policy), func(t *testing.T) {
			t.Parallel()
			e := shardtest.New(t, shardtest.Options{Queues: map[string]shard.QueuePolicy{"q": shardtest.Policy()}})
			// A 10 s interval: no regular occurrence during the test's
			// first seconds, whatever the phase... but 2 s apart keeps
			// it short: the missed ones are those before the start.
			c := compile(t, periodic.Schedule{Name: "c", Queue: "q", Interval: 2 * time.Second, MaxRetries: -1,
				CatchUp: tc.policy, CatchUpWindow: 10 * time.Second})
			l := e.Layout()
			now := time.Now()
			last := c.Next(now.Add(-21 * time.Second))
			if err := e.RDB.HSet(context.Background(), l.Periodic(l.HomeShard("c")), "c", last.UnixMilli()).Err(); err != nil {
				t.Fatal(err)
			}
			missed := c.Missed(last, now)
			run(t, e, 1, c)
			testenv.WaitFor(t, 10*time.Second, "the catch-up fired", func() (bool, string) {
				st, err := e.Store.LastFired(context.Background(), l.HomeShard("c"))
				return err == nil && !st["c"].Equal(last), fmt.Sprint(st, err)
			})
			o := occurrences(t, e, "c")
			var before []int64
			for _, ms := range o {
				if ms <= now.UnixMilli() {
					before = append(before, ms)
				}
			}
			if len(before) != tc.want || len(missed) != tc.want && tc.policy != periodic.CatchUpSkip {
				t.Fatalf("%s: %d missed occurrences fired %v (computed %v), want %d", tc.policy, len(before), before, missed, tc.want)
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
	last := c.Next(time.Now().Add(-2500 * time.Millisecond)) // the next is 0.5-1.5 s old
	if err := e.RDB.HSet(context.Background(), l.Periodic(l.HomeShard("h")), "h", last.UnixMilli()).Err(); err != nil {
		t.Fatal(err)
	}
	late := c.Next(last)
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
	c := compile(t, periodic.Schedule{Name: "p", Queue: "q", Interval: time.Second, MaxRetries: -1})
	if _, err := e.Store.PauseSchedule(context.Background(), "p", true); err != nil {
		t.Fatal(err)
	}
	run(t, e, 1, c)
	l := e.Layout()
	testenv.WaitFor(t, 10*time.Second, "an occurrence recorded", func() (bool, string) {
		st, err := e.Store.LastFired(context.Background(), l.HomeShard("p"))
		return err == nil && !st["p"].IsZero(), fmt.Sprint(st, err)
	})
	if o := occurrences(t, e, "p"); len(o) != 0 {
		t.Fatalf("a paused schedule created tasks %v", o)
	}
}
