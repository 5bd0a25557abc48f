package e2e_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// hgCLI runs the hourglass binary against a cluster, with its settings in
// a config file as an operator would write it.
type hgCLI struct {
	t   *testing.T
	bin string
	cfg string
}

func newCLI(t *testing.T, c *cluster) *hgCLI {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "hourglass.yaml")
	body := fmt.Sprintf("redis:\n  addr: %s\netcd:\n  endpoints: [%s]\nshards: %d\n", c.redis.Addr, c.etcd.Endpoint, nShards) +
		"periodic:\n  hourly:\n    queue: default\n    cron: \"0 * * * *\"\n"
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return &hgCLI{t: t, bin: testenv.BuildBinary(t, "./cmd/hourglass"), cfg: cfg}
}

// run runs one command line with stdin empty (not a terminal) and
// returns stdout, stderr and the exit code.
func (h *hgCLI) run(args ...string) (string, string, int) {
	h.t.Helper()
	cmd := exec.Command(h.bin, append([]string{"--config", h.cfg}, args...)...)
	cmd.Env = testenv.Environ()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		h.t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

// json runs a command with -o json, expects exit 0 and decodes stdout.
func (h *hgCLI) json(v any, args ...string) {
	h.t.Helper()
	out, errOut, code := h.run(append([]string{"-o", "json"}, args...)...)
	if code != 0 {
		h.t.Fatalf("hourglass %v: exit %d: %s", args, code, errOut)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		h.t.Fatalf("hourglass %v: %v in %q", args, err, out)
	}
}

// code runs a command and checks its exit code and stderr.
func (h *hgCLI) code(want int, stderr string, args ...string) {
	h.t.Helper()
	_, errOut, code := h.run(args...)
	if code != want || !strings.Contains(errOut, stderr) {
		h.t.Fatalf("hourglass %v: exit %d, stderr %q; want %d and %q", args, code, errOut, want, stderr)
	}
}

func queueOf(l struct {
	Queues []inspect.Queue `json:"queues"`
	Total  inspect.Counts  `json:"total"`
}, name string) inspect.Queue {
	for _, q := range l.Queues {
		if q.Name == name {
			return q
		}
	}
	return inspect.Queue{}
}

// TestCLIEveryVerb runs the real hourglass binary against a running
// scheduler and worker: every verb, with its JSON checked, and the exit
// codes of a missing task, a usage error and an unconfirmed bulk purge.
func TestCLIEveryVerb(t *testing.T) {
	testenv.Parallel(t)
	c := newCluster(t)
	tg := newTarget(t)
	tg.setBehave(func(w http.ResponseWriter, _ *http.Request, id string, _ int) bool {
		if strings.HasPrefix(id, "bad-") {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte("partner down"))
			return true
		}
		return false
	})
	args := append(workerArgs(tg.URL, 5*time.Second, 4), "-set", "queues.default.max_retries=0")
	sch := c.start("cli-s", args...)
	testenv.WaitFor(t, 20*time.Second, "replica owns all shards", func() (bool, string) { return c.settled("cli-s") })
	w := c.startWorker("cli-w", args...)
	h := newCLI(t, c)
	// A budget for the whole test's client calls, not a bound on any one
	// step: on a busy machine the 45 CLI runs alone can take a minute.
	ctx := testenv.Ctx(t, 5*time.Minute)

	for i := range 5 {
		if _, err := c.cli.Enqueue(ctx, client.Task{ID: fmt.Sprintf("bad-%d", i), Queue: "default"}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 30 {
		if _, err := c.cli.Enqueue(ctx, client.Task{ID: fmt.Sprintf("later-%d", i), Queue: "default", Delay: time.Hour, Payload: []byte("hello")}); err != nil {
			t.Fatal(err)
		}
	}
	var ls struct {
		Queues []inspect.Queue `json:"queues"`
		Total  inspect.Counts  `json:"total"`
	}
	testenv.WaitFor(t, 20*time.Second, "five dead letters", func() (bool, string) {
		h.json(&ls, "queue", "ls")
		q := queueOf(ls, "default")
		return q.Counts.Dead == 5 && q.Counts.Scheduled == 30, fmt.Sprintf("%+v", q.Counts)
	})
	if q := queueOf(ls, "default"); q.State != inspect.QueueActive || ls.Total.Dead != 5 {
		t.Fatalf("queue ls: %+v total %+v", q, ls.Total)
	}
	h.json(&ls, "stats")
	if ls.Total.Scheduled != 30 {
		t.Fatalf("stats: %+v", ls.Total)
	}
	var show inspect.Queue
	h.json(&show, "queue", "show", "default")
	if len(show.Shards) != nShards || show.Policy.MaxRetries == nil || *show.Policy.MaxRetries != 0 {
		t.Fatalf("queue show: %+v", show)
	}

	// Tasks: paging with the cursor, show, cancel.
	var page inspect.Page
	h.json(&page, "task", "ls", "--state", "scheduled", "--queue", "default", "--limit", "7", "--all")
	if len(page.Tasks) != 30 || page.Cursor != "" {
		t.Fatalf("task ls --all: %d tasks, cursor %q", len(page.Tasks), page.Cursor)
	}
	var first inspect.Page
	h.json(&first, "task", "ls", "--limit", "7")
	if len(first.Tasks) == 0 || first.Cursor == "" {
		t.Fatalf("one page: %+v", first)
	}
	var task inspect.Task
	h.json(&task, "task", "show", "later-3")
	if task.State != inspect.StateScheduled || string(task.Payload) != "hello" {
		t.Fatalf("task show: %+v", task)
	}
	var act map[string]any
	h.json(&act, "task", "cancel", "later-3")
	if act["action"] != "cancelled" || act["state"] != "scheduled" {
		t.Fatalf("task cancel: %v", act)
	}
	h.code(3, "not found", "task", "show", "later-3")

	// Dead letters: ls with filters, show, replay one, purge one, bulk.
	h.json(&page, "dlq", "ls", "--error", "partner down", "--since", "1h")
	if len(page.Tasks) != 5 || page.Tasks[0].Dead.Reason != "max retries exhausted" {
		t.Fatalf("dlq ls: %+v", page.Tasks)
	}
	h.json(&page, "dlq", "ls", "--error", "no such error")
	if len(page.Tasks) != 0 {
		t.Fatalf("dlq ls with a filter matching nothing: %+v", page.Tasks)
	}
	h.json(&task, "dlq", "show", "bad-0")
	if task.Dead == nil || !strings.Contains(task.Dead.Error, "partner down") || task.Attempts != 1 {
		t.Fatalf("dlq show: %+v", task)
	}
	tg.setBehave(nil) // the partner is back
	h.json(&act, "dlq", "replay", "bad-0")
	h.json(&act, "dlq", "purge", "bad-1")
	if act["action"] != "purged" {
		t.Fatalf("dlq purge: %v", act)
	}
	testenv.WaitFor(t, 20*time.Second, "the replayed task delivered again and acked", func() (bool, string) {
		_, _, code := h.run("task", "show", "bad-0")
		return code == 3, fmt.Sprint("exit ", code)
	})
	h.code(4, "--yes", "dlq", "purge", "--all")
	h.code(2, "needs an ID, --all, or filter flags", "dlq", "purge", "--all", "--queue", "default")
	var bulk struct {
		Action   string           `json:"action"`
		Progress inspect.Progress `json:"progress"`
	}
	h.json(&bulk, "dlq", "replay", "--queue", "default", "--at", "1h", "--yes")
	if bulk.Action != "replayed" || bulk.Progress.Done != 3 || bulk.Progress.ShardsDone != nShards {
		t.Fatalf("dlq replay by filter: %+v", bulk)
	}
	h.json(&task, "task", "show", "bad-2")
	if task.State != inspect.StateScheduled || task.Attempts != 0 {
		t.Fatalf("replayed by filter: %+v", task)
	}

	// Queues: pause, resume, set, rm.
	h.json(&act, "queue", "pause", "default")
	h.json(&show, "queue", "show", "default")
	if show.State != inspect.QueuePaused {
		t.Fatalf("after pause: %s", show.State)
	}
	h.json(&act, "queue", "resume", "default")
	h.json(&act, "queue", "set", "reports", "--max-retries", "9", "--timeout", "2m")
	h.json(&show, "queue", "show", "reports")
	if show.Policy.MaxRetries == nil || *show.Policy.MaxRetries != 9 || show.Policy.Timeout != 2*time.Minute || show.State != inspect.QueueActive {
		t.Fatalf("queue set: %+v", show)
	}
	// A second set changes only the flag it is given.
	h.json(&act, "queue", "set", "reports", "--backoff-base", "3s")
	h.json(&show, "queue", "show", "reports")
	if show.Policy.MaxRetries == nil || *show.Policy.MaxRetries != 9 || show.Policy.Timeout != 2*time.Minute || show.Policy.BackoffBase != 3*time.Second {
		t.Fatalf("queue set kept the other fields? %+v", show.Policy)
	}
	h.code(4, "--yes", "queue", "rm", "reports")
	h.json(&act, "queue", "rm", "reports", "--yes")
	if _, err := c.cli.Enqueue(ctx, client.Task{Queue: "reports"}); !errors.Is(err, client.ErrUnknownQueue) {
		t.Fatalf("enqueue to a removed queue: %v", err)
	}

	// Shards: owners from etcd.
	var shards []inspect.Shard
	h.json(&shards, "shards")
	if len(shards) != nShards || shards[0].Owner != "cli-s" || shards[0].Epoch == 0 || shards[0].Epoch != shards[0].StoredEpoch {
		t.Fatalf("shards: %+v", shards)
	}

	// Periodic schedules: the config's, their next occurrences, pause and
	// resume; a pause of a name the config lacks is a usage error; set and
	// rm of a registered one.
	var scheds []inspect.ScheduleInfo
	h.json(&scheds, "schedules", "--next", "2")
	if len(scheds) != 1 || scheds[0].Name != "hourly" || len(scheds[0].Next) != 2 || scheds[0].Next[0].Minute() != 0 || scheds[0].Paused {
		t.Fatalf("schedules: %+v", scheds)
	}
	h.json(&act, "schedule", "pause", "hourly")
	h.json(&scheds, "schedules")
	if !scheds[0].Paused || act["action"] != "paused" || act["schedule"] != "hourly" {
		t.Fatalf("after schedule pause: %v %+v", act, scheds)
	}
	h.json(&act, "schedule", "resume", "hourly")
	h.json(&scheds, "schedules")
	if scheds[0].Paused {
		t.Fatalf("after schedule resume: %+v", scheds)
	}
	h.code(2, "not in the configuration", "schedule", "pause", "daily")
	// Registered at run time: listed with its source, then removed; a
	// configured name is refused.
	h.json(&act, "schedule", "set", "daily", "--queue", "default", "--cron", "@daily")
	var rows []struct {
		Name   string `json:"name"`
		Source string `json:"source"`
	}
	h.json(&rows, "schedules")
	if act["action"] != "set" || len(rows) != 2 || rows[0].Name != "daily" || rows[0].Source != "registry" || rows[1].Source != "config" {
		t.Fatalf("after schedule set: %v %+v", act, rows)
	}
	h.json(&act, "schedule", "rm", "daily", "--yes")
	h.json(&rows, "schedules")
	if act["action"] != "removed" || len(rows) != 1 {
		t.Fatalf("after schedule rm: %v %+v", act, rows)
	}
	h.code(2, "is in the configuration", "schedule", "rm", "hourly", "--yes")

	h.code(2, "unknown command", "frobnicate")
	h.code(2, "takes 1 argument(s), got 0", "task", "show")
	if out, _, code := h.run("version"); code != 0 || !strings.HasPrefix(out, "hourglass ") {
		t.Fatalf("version: %d %q", code, out)
	}
	out, _, _ := h.run("queue", "ls")
	if !strings.Contains(out, "default") || !strings.Contains(out, "SCHEDULED") {
		t.Fatalf("queue ls table:\n%s", out)
	}

	// ps: the live scheduler and worker, each with its version, host and
	// queues; a killed worker is gone from the list at once (its
	// connections close), not after the silence bound.
	var ps struct {
		Processes []inspect.Process `json:"processes"`
	}
	h.json(&ps, "ps")
	if len(ps.Processes) != 2 {
		t.Fatalf("ps: %+v, want the scheduler and the worker", ps)
	}
	s, wk := ps.Processes[0], ps.Processes[1]
	host, _ := os.Hostname()
	if s.Role != "scheduler" || s.ID != "cli-s" || s.Version == "" || s.Host != host || s.PID != sch.Pid() {
		t.Fatalf("ps's scheduler: %+v", s)
	}
	if wk.Role != "worker" || wk.Queues["default"] != 4 || wk.Slots != 4 || wk.PID != w.Pid() || wk.Conns < 1 {
		t.Fatalf("ps's worker: %+v", wk)
	}
	if out, _, code := h.run("ps"); code != 0 || !strings.Contains(out, "BUSY") || !strings.Contains(out, "0/4") || !strings.Contains(out, "default:4") {
		t.Fatalf("ps table: %d\n%s", code, out)
	}
	w.Kill()
	testenv.WaitFor(t, 10*time.Second, "the killed worker gone from ps", func() (bool, string) {
		h.json(&ps, "ps")
		return len(ps.Processes) == 1 && ps.Processes[0].Role == "scheduler", fmt.Sprint(ps.Processes)
	})
}
