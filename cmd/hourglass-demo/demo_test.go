package main

import (
	"context"
	"fmt"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/shard"
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
// it started may be left and its directory must be gone. It runs the
// binaries the other tests of the checkout built (testenv, shared with
// e2e and cmd/worker) instead of linking its own; TestMakeDemo runs the
// demo's own build of them.
func TestDemoRunsAndCleansUp(t *testing.T) {
	t.Parallel()
	bins := filepath.Dir(testenv.BuildBinaries(t, "./cmd/scheduler", "./cmd/worker", "./cmd/hourglass")[0])
	var out testenv.Buffer
	// Generous bounds for a busy machine.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, options{schedulers: 2, workers: 2, shards: 8, rate: 100, maxDelay: time.Second, bins: bins}, &out)
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
// by DURATION: the demo builds its binaries, and it must exit 0, print
// its status and leave no process behind (TestDemoRunsAndCleansUp checks
// that tasks flow).
func TestMakeDemo(t *testing.T) {
	t.Parallel()
	testenv.LookBinary(t, "make")
	cmd := exec.Command("make", "demo", "DURATION=5s")
	cmd.Dir = testenv.ModuleRoot(t)
	// The go command builds what the race-enabled tests compiled already
	// (testenv.GoBuildFlags), not the whole module a second time.
	cmd.Env = append(os.Environ(), "GOFLAGS="+strings.Join(testenv.GoBuildFlags(), " "), "GORACE=atexit_sleep_ms=0")
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

// TestStatusCountsEveryShardOfTheSpan: after `hourglass shards resize
// 32` on a demo started with 16 shards, the status line's "due later"
// counts the tasks of shards 16..31 too, while the change runs and once
// it ended.
func TestStatusCountsEveryShardOfTheSpan(t *testing.T) {
	t.Parallel()
	r := testenv.StartRedis(t)
	rdb := r.Client(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	in, err := inspect.New(rdb, inspect.Config{Shards: 16})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.SetQueue(ctx, queue, inspect.DefaultPolicy()); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Resize(ctx, 32); err != nil {
		t.Fatal(err)
	}
	cli, err := client.New(rdb, client.Config{Shards: 16})
	if err != nil {
		t.Fatal(err)
	}
	var tasks []client.Task
	high := 0
	for i := range 200 {
		id := fmt.Sprintf("t-%d", i)
		if crc32.ChecksumIEEE([]byte(id))%32 >= 16 {
			high++
		}
		tasks = append(tasks, client.Task{ID: id, Queue: queue, Delay: time.Hour})
	}
	if _, err := cli.EnqueueBatch(ctx, tasks); err != nil {
		t.Fatal(err)
	}
	d := &demo{rdb: rdb, in: in}
	if st := d.status(0, statusLine{}); st.err != nil || st.scheduled != 200 {
		t.Fatalf("during the change: due later %d (%v), want 200 (%d of them in shards 16..31)", st.scheduled, st.err, high)
	}
	// The change ends (every shard done, as the schedulers would record).
	l0, _ := shard.NewLayout("hourglass", 16)
	store := shard.NewStore(rdb, l0)
	l, err := store.RefreshLayout(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for sh := range l.Existing() {
		if _, err := store.ShardDone(ctx, l, sh); err != nil {
			t.Fatal(err)
		}
	}
	if st := d.status(0, statusLine{}); st.err != nil || st.scheduled != 200 {
		t.Fatalf("after the change: due later %d (%v), want 200", st.scheduled, st.err)
	}
}
