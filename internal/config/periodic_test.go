package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/periodic"
)

func TestPeriodicSection(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "c.yaml")
	yaml := `queues:
  default: {}
periodic:
  nightly:
    queue: default
    cron: "30 2 * * *"
    time_zone: Europe/Paris
    max_retries: 0
  tick:
    queue: default
    interval: 1s
    overlap: skip
    catch_up: all
    catch_up_window: 10m
`
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load([]string{"-config", file}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ss, err := cfg.Schedules()
	if err != nil || len(ss) != 2 {
		t.Fatalf("schedules: %v %v", ss, err)
	}
	n, tick := ss[0], ss[1]
	if n.Name != "nightly" || n.MaxRetries == nil || *n.MaxRetries != 0 || n.TimeZone != "Europe/Paris" || n.Cron != "30 2 * * *" {
		t.Fatalf("nightly: %+v", n.Schedule)
	}
	if tick.Interval != time.Second || tick.Overlap != periodic.OverlapSkip || tick.CatchUp != periodic.CatchUpAll ||
		tick.CatchUpWindow != 10*time.Minute || tick.MaxRetries != nil {
		t.Fatalf("tick: %+v", tick.Schedule)
	}
}

func TestPeriodicErrorsNameTheKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-set", "periodic.a.queue=default", "-set", "periodic.a.cron=61 * * * *"}, "periodic.a.cron:"},
		{[]string{"-set", "periodic.a.queue=default", "-set", "periodic.a.cron=* * * * *", "-set", "periodic.a.time_zone=Nowhere/Land"}, "periodic.a.time_zone:"},
		{[]string{"-set", "periodic.a.queue=nope", "-set", "periodic.a.interval=1s"}, `periodic.a.queue: unknown queue "nope"`},
		{[]string{"-set", "periodic.a.queue=default", "-set", "periodic.a.interval=1s", "-set", "periodic.a.overlap=sometimes"}, "periodic.a.overlap:"},
		{[]string{"-set", "periodic.a.queue=default", "-set", "periodic.a.interval=1s", "-set", "periodic.a.max_retries=-1"}, "periodic.a.max_retries:"},
		{[]string{"-set", "periodic.a.queue=default", "-set", "periodic.a.interval=1s", "-set", "periodic.a.colour=red"}, "periodic.a.colour: unknown key"},
	} {
		_, err := Load(tc.args, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}
