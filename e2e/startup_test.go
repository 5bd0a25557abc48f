package e2e_test

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/promread"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestInvalidConfigExits: a bad value exits 2 naming the key.
func TestInvalidConfigExits(t *testing.T) {
	testenv.Parallel(t)
	bin := testenv.BuildBinary(t, "./cmd/scheduler")
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("scheduler: [unclosed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		env  []string
		want string
	}{
		{"limit negative", []string{"-set", "scheduler.scan_limit=-1"}, nil, "scheduler.scan_limit"},
		{"unknown key", []string{"-set", "scheduler.bogus=1"}, nil, "scheduler.bogus"},
		{"bad duration from env", nil, []string{"HOURGLASS_SCHEDULER__LEASE_TTL=soon"}, "scheduler.lease_ttl"},
		{"malformed yaml", []string{"-config", bad}, nil, "bad.yaml"},
		{"bad queue name", []string{"-set", "queues.bad name.max_retries=1"}, nil, "queues.bad name"},
		{"no such file", []string{"-config", "/nonexistent.yaml"}, nil, "/nonexistent.yaml"},
		{"bad cron", []string{"-set", "periodic.nightly.queue=default", "-set", "periodic.nightly.cron=0 25 * * *"}, nil, "periodic.nightly.cron"},
		{"bad time zone", []string{"-set", "periodic.nightly.queue=default", "-set", "periodic.nightly.cron=0 2 * * *",
			"-set", "periodic.nightly.time_zone=Moon/Base"}, nil, "periodic.nightly.time_zone"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bin, tc.args...)
			cmd.Env = testenv.Environ(tc.env...)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 {
				t.Fatalf("exit: %v, want status 2; output:\n%s", err, out)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Fatalf("output does not name %q:\n%s", tc.want, out)
			}
		})
	}
}

// TestEveryBinaryPrintsVersion: -version prints the build and exits 0.
func TestEveryBinaryPrintsVersion(t *testing.T) {
	testenv.Parallel(t)
	pkgs := []string{"./cmd/scheduler", "./cmd/worker", "./cmd/hourglass-demo", "./cmd/hourglass"}
	for i, bin := range testenv.BuildBinaries(t, pkgs...) {
		pkg := pkgs[i]
		cmd := exec.Command(bin, "-version")
		cmd.Env = testenv.Environ()
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "hourglass ") || !strings.Contains(string(out), "go1.") {
			t.Errorf("%s -version: %v, output %q", pkg, err, out)
		}
	}
}

// TestGrafanaDashboardMetricNames: every metric a panel of
// deploy/grafana/hourglass.json queries is exported by a running
// scheduler or worker binary (from their start: every series exists at
// zero before its first event).
func TestGrafanaDashboardMetricNames(t *testing.T) {
	testenv.Parallel(t)
	c := newCluster(t)
	tg := newTarget(t)
	args := workerArgs(tg.URL, 5*time.Second, 2)
	s := c.start("g-s", args...)
	w := c.startWorker("g-w", args...)
	testenv.WaitFor(t, 20*time.Second, "replica owns all shards", func() (bool, string) { return c.settled("g-s") })
	ctx := testenv.Ctx(t, time.Minute)
	exported := map[string]bool{}
	testenv.WaitFor(t, 20*time.Second, "both binaries serve /metrics", func() (bool, string) {
		for _, p := range []*sched{s, w} {
			fams, err := promread.Families(ctx, "http://"+p.http+"/metrics")
			if err != nil {
				return false, err.Error()
			}
			for name := range fams {
				exported[name] = true
			}
		}
		return true, ""
	})
	b, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(t), "deploy/grafana/hourglass.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Type    string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	queried := 0
	for _, p := range dash.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, name := range regexp.MustCompile(`hourglass_[a-z_]+`).FindAllString(tg.Expr, -1) {
				queried++
				base := name
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					base = strings.TrimSuffix(base, suffix)
				}
				if !exported[base] {
					t.Errorf("panel %q queries %s, which no binary exports", p.Title, name)
				}
			}
		}
	}
	t.Logf("%d panels query %d metric references, all exported", len(dash.Panels), queried)
}
