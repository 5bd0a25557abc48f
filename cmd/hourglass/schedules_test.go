package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
	"github.com/hourglass-sched/hourglass/periodic"
)

// TestScheduleVerbs runs schedules, schedule pause and schedule resume
// in process against a real Redis, with two schedules in the config
// file: the last occurrence a shard recorded shows, --next sets the
// occurrences in the JSON, a pause shows and is undone by a resume, and
// pausing a name the config does not declare is a usage error. Then
// schedule set and rm: a registered schedule is listed with its source
// (a configured name shadows a registered one), can be paused, and is
// removed; set and rm of a configured name, an invalid schedule and an
// unknown queue are refused with their exit codes.
func TestScheduleVerbs(t *testing.T) {
	t.Parallel()
	r := testenv.StartRedis(t)
	cfg := filepath.Join(t.TempDir(), "hourglass.yaml")
	body := fmt.Sprintf(`redis:
  addr: %s
namespace: clitest
shards: 4
periodic:
  tick:
    queue: default
    interval: 1m
  nightly:
    queue: default
    cron: "30 2 * * *"
    time_zone: Europe/Paris
    overlap: skip
`, r.Addr)
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cli := cliWith(t, cfg)
	listAll := func(args ...string) []scheduleRow {
		t.Helper()
		out, errOut, code := cli(append([]string{"-o", "json", "schedules"}, args...)...)
		if code != exitOK {
			t.Fatalf("schedules %v: exit %d: %s", args, code, errOut)
		}
		var ss []scheduleRow
		if err := json.Unmarshal([]byte(out), &ss); err != nil {
			t.Fatalf("schedules: %v in %q", err, out)
		}
		return ss
	}
	list := func(args ...string) []scheduleRow {
		t.Helper()
		ss := listAll(args...)
		if len(ss) != 2 || ss[0].Name != "nightly" || ss[1].Name != "tick" || ss[0].Source != "config" || ss[1].Source != "config" {
			t.Fatalf("schedules: %+v", ss)
		}
		return ss
	}

	// An occurrence of tick recorded by its shard's owner, as a scheduler
	// fires it (the queue registered, epoch 1 on a fresh Redis).
	ctx := testenv.Ctx(t, 30*time.Second)
	rdb := r.Client(t)
	in, err := inspect.New(rdb, inspect.Config{Namespace: "clitest", Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.SetQueue(ctx, "default", inspect.DefaultPolicy()); err != nil {
		t.Fatal(err)
	}
	l, _ := shard.NewLayout("clitest", 4)
	occ := time.Now().Truncate(time.Minute)
	if _, err := shard.NewStore(rdb, l).Fire(ctx, l.HomeShard("tick"), shard.FireArgs{Schedule: "tick", Occurrence: occ, Epoch: 1,
		Task: shard.EnqueueArgs{ID: l.OccurrenceID("tick", occ), Queue: "default", Due: occ, MaxRetries: -1}}); err != nil {
		t.Fatal(err)
	}

	ss := list()
	ni, tick := ss[0], ss[1]
	if !tick.LastFired.Equal(occ) || tick.Spec != "every 1m0s" || len(tick.Next) != 3 ||
		!tick.Next[0].After(time.Now().Add(-time.Second)) || tick.Next[1].Sub(tick.Next[0]) != time.Minute || tick.Paused {
		t.Fatalf("tick: %+v", tick)
	}
	if !ni.LastFired.IsZero() || ni.TimeZone != "Europe/Paris" || ni.Overlap != "skip" || len(ni.Next) != 3 || ni.Next[0].Minute() != 30 {
		t.Fatalf("nightly: %+v", ni)
	}
	if ss := list("--next", "1"); len(ss[1].Next) != 1 {
		t.Fatalf("--next 1: %+v", ss[1])
	}

	// Without the schedulers' configuration nothing is declared: the CLI
	// says which schedules Redis records and exits 3, not an empty table.
	bare := filepath.Join(t.TempDir(), "bare.yaml")
	if err := os.WriteFile(bare, []byte(fmt.Sprintf("redis:\n  addr: %s\nnamespace: clitest\nshards: 4\n", r.Addr)), 0o600); err != nil {
		t.Fatal(err)
	}
	var bareOut, bareErr bytes.Buffer
	if code := run([]string{"--config", bare, "schedules"}, strings.NewReader(""), &bareOut, &bareErr); code != exitNotFound ||
		!strings.Contains(bareErr.String(), "Redis records the state of 1 (tick): pass the schedulers' configuration with -c") {
		t.Fatalf("schedules without the config: exit %d, %q %q", code, bareOut.String(), bareErr.String())
	}

	out, errOut, code := cli("-o", "json", "schedule", "pause", "nightly")
	if code != exitOK || !strings.Contains(out, `"action": "paused"`) || !strings.Contains(out, `"schedule": "nightly"`) {
		t.Fatalf("pause: exit %d, %q %q", code, out, errOut)
	}
	if ss := list(); !ss[0].Paused || ss[0].PausedAt.IsZero() || ss[1].Paused {
		t.Fatalf("after pause: %+v", ss)
	}
	table, _, code := cli("schedules")
	if code != exitOK || !strings.Contains(table, "LAST FIRED") || !strings.Contains(table, "since ") || !strings.Contains(table, "every 1m0s") {
		t.Fatalf("table: exit %d\n%s", code, table)
	}
	if out, _, code := cli("schedule", "resume", "nightly"); code != exitOK || out != "resumed nightly\n" {
		t.Fatalf("resume: exit %d, %q", code, out)
	}
	if ss := list(); ss[0].Paused {
		t.Fatalf("after resume: %+v", ss[0])
	}

	_, errOut, code = cli("schedule", "pause", "nightlly")
	if code != exitUsage || !strings.Contains(errOut, `"nightlly" is not in the configuration`) || !strings.Contains(errOut, "nightly, tick") {
		t.Fatalf("pause of an unknown schedule: exit %d, %q", code, errOut)
	}
	if _, errOut, code := cli("schedules", "--next", "-1"); code != exitUsage {
		t.Fatalf("--next -1: exit %d, %q", code, errOut)
	}

	// schedule set: a registered schedule, listed after the configured
	// ones by name, with its source; a set of the same name replaces it.
	out, errOut, code = cli("-o", "json", "schedule", "set", "reg", "--queue", "default", "--interval", "1h")
	if code != exitOK || !strings.Contains(out, `"action": "set"`) || !strings.Contains(out, `"schedule": "reg"`) {
		t.Fatalf("set: exit %d, %q %q", code, out, errOut)
	}
	out, errOut, code = cli("schedule", "set", "reg", "--queue", "default", "--cron", "0 9 * * 1-5", "--tz", "Europe/Paris",
		"--payload", "hi", "--jitter", "1m", "--max-retries", "2", "--timeout", "5s", "--catch-up", "all", "--catch-up-window", "3h", "--overlap", "skip")
	if code != exitOK || out != "set reg\n" {
		t.Fatalf("set again: exit %d, %q %q", code, out, errOut)
	}
	reg, err := in.RegisteredSchedules(ctx)
	if err != nil || len(reg) != 1 {
		t.Fatalf("registered: %+v %v", reg, err)
	}
	if r := reg[0]; r.Name != "reg" || r.Queue != "default" || r.Cron != "0 9 * * 1-5" || r.Interval != 0 || r.TimeZone != "Europe/Paris" ||
		string(r.Payload) != "hi" || r.Jitter != time.Minute || r.MaxRetries == nil || *r.MaxRetries != 2 || r.Timeout != 5*time.Second ||
		r.CatchUp != "all" || r.CatchUpWindow != 3*time.Hour || r.Overlap != "skip" {
		t.Fatalf("registered: %+v", r.Schedule)
	}
	// A registered "tick", as the Go API allows: the configured one
	// shadows it, so it is not listed.
	if err := in.SetSchedule(ctx, periodic.Schedule{Name: "tick", Queue: "default", Interval: time.Hour}); err != nil {
		t.Fatal(err)
	}
	ss = listAll()
	if len(ss) != 3 || ss[0].Name != "nightly" || ss[1].Name != "reg" || ss[2].Name != "tick" ||
		ss[1].Source != "registry" || ss[1].Spec != "0 9 * * 1-5" || ss[1].TimeZone != "Europe/Paris" || ss[2].Source != "config" || ss[2].Spec != "every 1m0s" {
		t.Fatalf("with a registered schedule: %+v", ss)
	}
	table, _, code = cli("schedules")
	if lines := strings.Split(table, "\n"); code != exitOK || !strings.Contains(lines[0], "SOURCE") ||
		!strings.Contains(lines[2], "reg") || !strings.Contains(lines[2], "registry") || !strings.Contains(lines[3], "config") {
		t.Fatalf("table: exit %d\n%s", code, table)
	}
	if out, errOut, code := cli("schedule", "pause", "reg"); code != exitOK || out != "paused reg\n" {
		t.Fatalf("pause of a registered schedule: exit %d, %q %q", code, out, errOut)
	}
	if ss := listAll(); !ss[1].Paused {
		t.Fatalf("registered schedule paused: %+v", ss[1])
	}
	if _, errOut, code := cli("schedule", "pause", "regg"); code != exitUsage || !strings.Contains(errOut, "(registered: reg)") {
		t.Fatalf("pause of an unknown schedule: exit %d, %q", code, errOut)
	}

	// Refused: a configured name, an invalid schedule (the flag named),
	// an unknown queue.
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"set", "nightly", "--queue", "default", "--interval", "1h"}, exitUsage, `"nightly" is in the configuration's periodic section`},
		{[]string{"set", "bad", "--queue", "default", "--cron", "61 * * * *"}, exitUsage, "--cron: "},
		{[]string{"set", "bad", "--queue", "default", "--cron", "@daily", "--tz", "Mars/Olympus"}, exitUsage, "--tz: "},
		{[]string{"set", "bad", "--queue", "default", "--interval", "1h", "--catch-up", "never"}, exitUsage, "--catch-up: "},
		{[]string{"set", "bad", "--interval", "1h"}, exitUsage, "--queue: required"},
		{[]string{"set", "bad", "--queue", "default"}, exitUsage, "--cron: give cron or interval"},
		{[]string{"set", "bad", "--queue", "nope", "--interval", "1h"}, exitNotFound, `queue "nope" is not registered`},
		{[]string{"rm", "tick", "--yes"}, exitUsage, `"tick" is in the configuration's periodic section`},
		{[]string{"rm", "reg"}, exitRefused, "pass --yes"},
		{[]string{"rm", "nope", "--yes"}, exitNotFound, `schedule "nope" is not registered`},
	} {
		if _, errOut, code := cli(append([]string{"schedule"}, c.args...)...); code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, %q; want exit %d, %q", c.args, code, errOut, c.code, c.want)
		}
	}
	if reg, err := in.RegisteredSchedules(ctx); err != nil || len(reg) != 2 {
		t.Fatalf("refused sets registered something: %+v %v", reg, err)
	}

	// schedule rm: no longer registered, so no longer listed.
	out, errOut, code = cli("-o", "json", "schedule", "rm", "reg", "--yes")
	if code != exitOK || !strings.Contains(out, `"action": "removed"`) || !strings.Contains(out, `"schedule": "reg"`) {
		t.Fatalf("rm: exit %d, %q %q", code, out, errOut)
	}
	list()
	if err := in.RemoveSchedule(ctx, "reg"); !errors.Is(err, inspect.ErrNotFound) {
		t.Fatalf("removed twice: %v", err)
	}
	if paused, err := in.Schedules(ctx, nil, time.Now(), 0); err != nil || len(paused) != 0 {
		t.Fatalf("no definitions, no schedules: %v %v", paused, err)
	}
}

// TestScheduleResumeOfAnUnknownNameIsRefused (issue 24, item 12, as for
// queues): schedule resume of a name neither configured, registered nor
// paused printed "resumed nosuch" and exited 0; it is now refused as a
// pause of it is (exit 2, the names known). The pause of a schedule
// since removed can still be cleared.
func TestScheduleResumeOfAnUnknownNameIsRefused(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t, "sched")
	ctx := testenv.Ctx(t, 10*time.Second)
	if _, err := e.store.PauseSchedule(ctx, "gone", true); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := e.cli("schedule", "resume", "nosuch")
	if want := "hourglass: schedule \"nosuch\" is not in the configuration's periodic section (configured: none) and not registered at run time (registered: none)\n"; code != exitUsage || out != "" || errOut != want {
		t.Fatalf("resume of an unknown schedule: exit %d, stdout %q, stderr\n %q\nwant exit 2, stderr\n %q", code, out, errOut, want)
	}
	if out, errOut, code := e.cli("schedule", "resume", "gone"); code != exitOK || out != "resumed gone\n" {
		t.Fatalf("resume of a paused schedule since removed: exit %d, %q %q", code, out, errOut)
	}
	if paused, err := e.store.PausedSchedules(ctx); err != nil || len(paused) != 0 {
		t.Fatalf("paused schedules after the resume: %v %v", paused, err)
	}
}

// TestScheduleHistory: schedule history lists a schedule's outcomes as
// fire.lua and the catch-up policy recorded them, newest first, in a
// table and as JSON; a schedule without any says so.
func TestScheduleHistory(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t, "hist")
	ctx := testenv.Ctx(t, 10*time.Second)
	l := e.store.Layout()
	sh := l.HomeShard("nightly")
	occ := time.Now().Add(-time.Hour).Truncate(time.Second)
	skipped := occ.Add(-time.Hour)
	skip := shard.FireArgs{Schedule: "nightly", Occurrence: skipped, Epoch: 1,
		Task:   shard.EnqueueArgs{ID: l.OccurrenceID("nightly", skipped), Queue: "q", MaxRetries: -1},
		Policy: &shard.PolicySkip{First: occ.Add(-3 * time.Hour), Count: 3, Reason: "catch_up skip: 3 missed while no scheduler fired them"}}
	if r, err := e.store.Fire(ctx, sh, skip); err != nil || r.Outcome != shard.SkippedPolicy {
		t.Fatalf("policy skip: %+v %v", r, err)
	}
	// The same skip again (another owner's pass before the next firing)
	// is recorded already: the policy's skip is the last recorded.
	if r, err := e.store.Fire(ctx, sh, skip); err != nil || r.Outcome != shard.AlreadyFired {
		t.Fatalf("the same policy skip again: %+v %v", r, err)
	}
	id := l.OccurrenceID("nightly", occ)
	r, err := e.store.Fire(ctx, sh, shard.FireArgs{Schedule: "nightly", Occurrence: occ, Epoch: 1, CaughtUp: true,
		Task: shard.EnqueueArgs{ID: id, Queue: "q", Due: occ, MaxRetries: -1}})
	if err != nil || r.Outcome != shard.Fired {
		t.Fatalf("fire: %+v %v", r, err)
	}
	out, errOut, code := e.cli("-o", "json", "schedule", "history", "nightly")
	var got struct{ History []inspect.Occurrence }
	if err := json.Unmarshal([]byte(out), &got); code != exitOK || err != nil || len(got.History) == 0 {
		t.Fatalf("history -o json: exit %d, %v, stdout %q, stderr %q", code, err, out, errOut)
	}
	last := got.History[len(got.History)-1]
	if last.Outcome != inspect.OutcomeSkipped || last.Count != 3 || !strings.Contains(last.Detail, "catch_up skip: 3 missed") {
		t.Fatalf("the oldest entry: %+v", last)
	}
	if len(got.History) != 2 || (got.History[0].Outcome != inspect.OutcomeFired || !got.History[0].CaughtUp || got.History[0].TaskID != id) {
		t.Fatalf("the newest entry: %+v", got.History[0])
	}
	if out, _, code := e.cli("schedule", "history", "nightly"); code != exitOK || !strings.Contains(out, "skipped ×3") {
		t.Fatalf("history table: exit %d, %q", code, out)
	}
	if out, _, code := e.cli("schedule", "history", "never"); code != exitOK || !strings.Contains(out, "no history") {
		t.Fatalf("history of a schedule that never fired: exit %d, %q", code, out)
	}
	if _, _, code := e.cli("schedule", "history", "bad name!"); code != exitUsage {
		t.Fatalf("history of an invalid name: exit %d", code)
	}
}
