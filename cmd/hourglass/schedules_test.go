package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestScheduleVerbs runs schedules, schedule pause and schedule resume
// in process against a real Redis, with two schedules in the config
// file: the last occurrence a shard recorded shows, --next sets the
// occurrences in the JSON, a pause shows and is undone by a resume, and
// pausing a name the config does not declare is a usage error.
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
	cli := func(args ...string) (string, string, int) {
		t.Helper()
		var out, errOut bytes.Buffer
		code := run(append([]string{"--config", cfg}, args...), strings.NewReader(""), &out, &errOut)
		return out.String(), errOut.String(), code
	}
	list := func(args ...string) []inspect.ScheduleInfo {
		t.Helper()
		out, errOut, code := cli(append([]string{"-o", "json", "schedules"}, args...)...)
		if code != exitOK {
			t.Fatalf("schedules %v: exit %d: %s", args, code, errOut)
		}
		var ss []inspect.ScheduleInfo
		if err := json.Unmarshal([]byte(out), &ss); err != nil {
			t.Fatalf("schedules: %v in %q", err, out)
		}
		if len(ss) != 2 || ss[0].Name != "nightly" || ss[1].Name != "tick" {
			t.Fatalf("schedules: %+v", ss)
		}
		return ss
	}

	// An occurrence of tick recorded by its shard's owner, as a scheduler
	// fires it (the queue registered, epoch 1 on a fresh Redis).
	ctx := testenv.Ctx(t, 30*time.Second)
	rdb := r.Client(t)
	in, err := inspect.New(inspect.Options{Redis: rdb, Namespace: "clitest", Shards: 4})
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
	if paused, err := in.Schedules(ctx, nil, time.Now(), 0); err != nil || len(paused) != 0 {
		t.Fatalf("no definitions, no schedules: %v %v", paused, err)
	}
}
