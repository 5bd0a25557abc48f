package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// processesMentioning returns the pids whose command line contains s.
func processesMentioning(s string) []string {
	var out []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err == nil && strings.Contains(string(b), s) {
			out = append(out, filepath.Base(d))
		}
	}
	return out
}

// TestDemoRunsAndCleansUp runs the demo for a bounded time: tasks must
// flow (delivered to the workers, some retried), and afterwards no process
// it started may be left and its directory must be gone.
func TestDemoRunsAndCleansUp(t *testing.T) {
	t.Parallel()
	var out testenv.Buffer
	// The bounds include run's build of the binaries, which on a cold
	// build cache of a busy machine takes a minute or more.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, options{schedulers: 2, workers: 2, shards: 8, rate: 100, maxDelay: time.Second}, &out)
	}()
	flow := regexp.MustCompile(`delivered (\d+) .* retried (\d+)`)
	deadline := time.After(4 * time.Minute)
	for flowing := false; !flowing; {
		select {
		case err := <-done:
			t.Fatalf("demo ended early: %v\n%s", err, out.String())
		case <-deadline:
			t.Fatalf("no task delivered and retried within 4 minutes:\n%s", out.String())
		case <-time.After(100 * time.Millisecond):
		}
		for _, m := range flow.FindAllStringSubmatch(out.String(), -1) {
			delivered, _ := strconv.Atoi(m[1])
			retried, _ := strconv.Atoi(m[2])
			flowing = delivered > 0 && retried > 0
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("demo failed: %v\n%s", err, out.String())
	}
	text := out.String()
	dir := regexp.MustCompile(`in (/\S*hourglass-demo-\d+)`).FindStringSubmatch(text)
	if dir == nil {
		t.Fatalf("demo did not print its directory:\n%s", text)
	}
	if pids := processesMentioning(dir[1]); len(pids) > 0 {
		t.Fatalf("processes left running after the demo: %v", pids)
	}
	if _, err := os.Stat(dir[1]); !os.IsNotExist(err) {
		t.Fatalf("demo directory %s not removed: %v", dir[1], err)
	}
	if !strings.Contains(text, "owners scheduler-1:") || !strings.Contains(text, "final:") {
		t.Fatalf("status lines incomplete:\n%s", text)
	}
}

// TestMakeDemo runs README's first command as a newcomer would, bounded
// by DURATION: it must exit 0, print its status and leave no process
// behind (TestDemoRunsAndCleansUp checks that tasks flow).
func TestMakeDemo(t *testing.T) {
	t.Parallel()
	testenv.LookBinary(t, "make")
	cmd := exec.Command("make", "demo", "DURATION=5s")
	cmd.Dir = testenv.ModuleRoot(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make demo failed: %v\n%s", err, out)
	}
	text := string(out)
	if !strings.Contains(text, "final:") || !strings.Contains(text, "delivered") {
		t.Fatalf("make demo printed no status:\n%s", text)
	}
	dir := regexp.MustCompile(`in (/\S*hourglass-demo-\d+)`).FindStringSubmatch(text)
	if dir == nil {
		t.Fatalf("demo did not print its directory:\n%s", text)
	}
	if pids := processesMentioning(dir[1]); len(pids) > 0 {
		t.Fatalf("processes left running after make demo: %v", pids)
	}
}
