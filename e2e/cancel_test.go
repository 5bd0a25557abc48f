package e2e_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/internal/promread"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestCancelRunningCommand (#27): tasks whose commands run in a worker
// binary are cancelled from this process. Each program gets SIGTERM (its
// trap writes "term" and exits 0), the task ends "cancelled", its exit
// is not recorded as a success, and it never runs again.
func TestCancelRunningCommand(t *testing.T) {
	testenv.Parallel(t)
	c := newCluster(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "worker.yaml")
	// The trap is set before "start" is written: the test cancels a task
	// once it reads "start", and a SIGTERM before the trap killed the
	// shell without "term" (a flaky failure in make test).
	script := `trap 'echo term >> ` + dir + `/$HOURGLASS_TASK_ID; exit 0' TERM; echo start >> ` + dir + `/$HOURGLASS_TASK_ID; sleep 60 & wait`
	yaml := fmt.Sprintf("queues:\n  default:\n    timeout: 2m\n    concurrency: 16\n    command: [sh, -c, %q]\n", script)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	c.start("c-1", "-config", cfg)
	testenv.WaitFor(t, 20*time.Second, "1 replica owns the 16 shards", func() (bool, string) { return c.settled("c-1") })
	w := c.startWorker("cw-1", "-config", cfg)
	ctx := testenv.Ctx(t, 2*time.Minute)

	const n = 10
	read := func(id string) string {
		b, _ := os.ReadFile(filepath.Join(dir, id))
		return string(b)
	}
	for i := range n {
		if _, err := c.cli.Enqueue(ctx, client.Task{ID: fmt.Sprintf("long-%d", i), Queue: "default"}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		id := fmt.Sprintf("long-%d", i)
		testenv.WaitFor(t, 30*time.Second, id+" running", func() (bool, string) { return read(id) == "start\n", read(id) })
		if st, err := c.cli.Cancel(ctx, id); err != nil || st != client.StateActive {
			t.Fatalf("cancel %s: %q, %v; want cancelled from active", id, st, err)
		}
	}
	for i := range n {
		id := fmt.Sprintf("long-%d", i)
		testenv.WaitFor(t, 10*time.Second, id+"'s program told to stop", func() (bool, string) { return read(id) == "start\nterm\n", read(id) })
		if info, err := c.cli.Lookup(ctx, id); err != nil || info.State != client.StateCancelled || info.Ended.IsZero() {
			t.Errorf("lookup %s: %+v, %v; want cancelled", id, info, err)
		}
	}
	testenv.WaitFor(t, 10*time.Second, "the worker counts every cancel and records nothing", func() (bool, string) {
		fams, err := promread.Families(ctx, "http://"+w.http+"/metrics")
		if err != nil {
			return false, err.Error()
		}
		cancelled, err := promread.Counter(fams, "hourglass_worker_cancelled_total")
		if err != nil {
			return false, err.Error()
		}
		acks, _ := promread.Counter(fams, "hourglass_worker_acks_total")
		return cancelled == n && acks == 0, fmt.Sprintf("cancelled %v, acks %v", cancelled, acks)
	})
	// Never run again: each program started once (no retry, no recovery).
	for i := range n {
		if got := read(fmt.Sprintf("long-%d", i)); strings.Count(got, "start") != 1 {
			t.Errorf("long-%d ran %d times", i, strings.Count(got, "start"))
		}
	}
}
