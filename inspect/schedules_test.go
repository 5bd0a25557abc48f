package inspect_test

import (
	"errors"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
	"github.com/hourglass-sched/hourglass/periodic"
)

func compile(t *testing.T, s periodic.Schedule) *periodic.Compiled {
	t.Helper()
	c, err := s.Compile()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSchedulesShowStateAndNext: Schedules reports the definitions it is
// given with the last occurrence fired (an occurrence skipped while
// paused does not count) and the last recorded,
// the next occurrences of an interval and a cron schedule, and the pause
// state; a schedule recorded or paused in Redis but not given is left
// out; pause and resume are idempotent and refuse a bad name.
func TestSchedulesShowStateAndNext(t *testing.T) {
	t.Parallel()
	e, in := newInspector(t, 4)
	ctx := testenv.Ctx(t, 30*time.Second)
	l := e.Layout()
	every := compile(t, periodic.Schedule{Name: "every-10s", Queue: "a", Interval: 10 * time.Second})
	nightly := compile(t, periodic.Schedule{Name: "nightly", Queue: "b", Cron: "30 2 * * *", TimeZone: "Europe/Paris",
		CatchUp: periodic.CatchUpLatest, Overlap: periodic.OverlapSkip})
	defs := []*periodic.Compiled{every, nightly}

	fire := func(name string, occ time.Time) {
		t.Helper()
		id := l.OccurrenceID(name, occ)
		r, err := e.Store.Fire(ctx, l.HomeShard(name), shard.FireArgs{Schedule: name, Occurrence: occ, Epoch: shardtest.Epoch,
			Task: shard.EnqueueArgs{ID: id, Queue: "a", Due: occ, MaxRetries: -1}})
		if err != nil || r.Outcome != shard.Fired {
			t.Fatalf("fire %s: %+v %v", name, r, err)
		}
	}
	fired := time.Date(2030, 3, 1, 11, 0, 0, 0, time.UTC)
	fire("every-10s", fired)
	// Paused: the next occurrences are recorded as skipped, not fired.
	skipped := fired.Add(10 * time.Second)
	if r, err := e.Store.Fire(ctx, l.HomeShard("every-10s"), shard.FireArgs{Schedule: "every-10s", Occurrence: skipped, Epoch: shardtest.Epoch,
		Paused: true, Task: shard.EnqueueArgs{ID: l.OccurrenceID("every-10s", skipped), Queue: "a", Due: skipped, MaxRetries: -1}}); err != nil || r.Outcome != shard.SkippedPaused {
		t.Fatalf("paused occurrence: %+v %v", r, err)
	}
	fire("gone", fired) // recorded, and no longer configured
	if err := in.PauseSchedule(ctx, "gone"); err != nil {
		t.Fatal(err)
	}

	now := time.Date(2030, 3, 1, 12, 0, 5, 0, time.UTC)
	got, err := in.Schedules(ctx, defs, now, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "every-10s" || got[1].Name != "nightly" {
		t.Fatalf("schedules: %+v", got)
	}
	ev, ni := got[0], got[1]
	if !ev.LastFired.Equal(fired) || !ev.LastRecorded.Equal(skipped) || ev.Spec != "every 10s" || ev.TimeZone != "" || ev.Queue != "a" ||
		ev.Shard != l.HomeShard("every-10s") || ev.Paused || ev.CatchUp != periodic.CatchUpSkip || ev.Overlap != periodic.OverlapAllow {
		t.Fatalf("interval schedule: %+v", ev)
	}
	wantNext := []time.Time{now.Add(5 * time.Second), now.Add(15 * time.Second), now.Add(25 * time.Second)}
	if len(ev.Next) != 3 {
		t.Fatalf("next of the interval schedule: %v", ev.Next)
	}
	for k, w := range wantNext {
		if !ev.Next[k].Equal(w) {
			t.Fatalf("next of the interval schedule: %v, want %v", ev.Next, wantNext)
		}
	}
	// Fired a little ahead (the owner's lead): that occurrence is no
	// longer next.
	fire("every-10s", now.Add(5*time.Second))
	ahead, err := in.Schedules(ctx, defs[:1], now, 1)
	if err != nil || len(ahead[0].Next) != 1 || !ahead[0].Next[0].Equal(now.Add(15*time.Second)) {
		t.Fatalf("next after an occurrence fired ahead: %+v %v", ahead, err)
	}
	paris, _ := time.LoadLocation("Europe/Paris")
	if !ni.LastFired.IsZero() || ni.Spec != "30 2 * * *" || ni.TimeZone != "Europe/Paris" ||
		ni.CatchUp != periodic.CatchUpLatest || ni.Overlap != periodic.OverlapSkip || len(ni.Next) != 3 ||
		!ni.Next[0].Equal(time.Date(2030, 3, 2, 2, 30, 0, 0, paris)) || !ni.Next[2].Equal(time.Date(2030, 3, 4, 2, 30, 0, 0, paris)) {
		t.Fatalf("cron schedule: %+v", ni)
	}

	// Pause and resume, each twice.
	before := time.Now().Add(-time.Second)
	for range 2 {
		if err := in.PauseSchedule(ctx, "nightly"); err != nil {
			t.Fatal(err)
		}
	}
	got, err = in.Schedules(ctx, defs, now, 0)
	if err != nil {
		t.Fatal(err)
	}
	if ni := got[1]; !ni.Paused || ni.PausedAt.Before(before) || len(ni.Next) != 0 || got[0].Paused {
		t.Fatalf("after pause: %+v", got)
	}
	for range 2 {
		if err := in.ResumeSchedule(ctx, "nightly"); err != nil {
			t.Fatal(err)
		}
	}
	got, err = in.Schedules(ctx, defs, now, 1)
	if err != nil {
		t.Fatal(err)
	}
	if ni := got[1]; ni.Paused || !ni.PausedAt.IsZero() || len(ni.Next) != 1 {
		t.Fatalf("after resume: %+v", got)
	}
	if paused, err := e.Store.PausedSchedules(ctx); err != nil || len(paused) != 1 {
		t.Fatalf("paused in Redis: %v %v (only gone)", paused, err)
	}

	for _, name := range []string{"", "no spaces", "a.b/c"} {
		if err := in.PauseSchedule(ctx, name); !errors.Is(err, inspect.ErrInvalidArgument) {
			t.Errorf("pause %q: %v", name, err)
		}
	}
	if _, err := in.Schedules(ctx, defs, now, inspect.MaxNext+1); !errors.Is(err, inspect.ErrInvalidArgument) {
		t.Errorf("too many next occurrences: %v", err)
	}
}
