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

// cliEnv is a real Redis holding namespace ns (2 shards) with queue "q"
// registered, and a config file for it; cli runs the CLI in process with
// that config and an empty stdin (not a terminal).
type cliEnv struct {
	t     *testing.T
	redis *testenv.Redis
	store *shard.Store
	cfg   string
}

func newCLIEnv(t *testing.T, ns string) *cliEnv {
	t.Helper()
	r := testenv.StartRedis(t)
	cfg := writeConfig(t, fmt.Sprintf("redis:\n  addr: %s\netcd:\n  endpoints: [http://127.0.0.1:1]\n  dial_timeout: 200ms\nnamespace: %s\nshards: 2\n", r.Addr, ns))
	l, err := shard.NewLayout(ns, 2)
	if err != nil {
		t.Fatal(err)
	}
	store := shard.NewStore(r.Client(t), l)
	if err := store.RegisterQueues(testenv.Ctx(t, 10*time.Second), map[string]shard.QueuePolicy{"q": {MaxRetries: 3, Timeout: time.Minute, MaxPayload: 1024}}); err != nil {
		t.Fatal(err)
	}
	return &cliEnv{t: t, redis: r, store: store, cfg: cfg}
}

// cli runs the CLI and returns its stdout, stderr and exit code.
func (e *cliEnv) cli(args ...string) (string, string, int) {
	e.t.Helper()
	return cliWith(e.t, e.cfg)(args...)
}

// writeConfig writes body as a config file in the test's directory and
// returns its path.
func writeConfig(t *testing.T, body string) string {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "hourglass.yaml")
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// cliWith returns a function that runs the CLI in process with the
// config file cfg and an empty stdin (not a terminal), and returns its
// stdout, stderr and exit code.
func cliWith(t *testing.T, cfg string) func(args ...string) (string, string, int) {
	return func(args ...string) (string, string, int) {
		t.Helper()
		var out, errOut bytes.Buffer
		code := run(append([]string{"--config", cfg}, args...), strings.NewReader(""), &out, &errOut)
		return out.String(), errOut.String(), code
	}
}

func TestExitCodes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want int
	}{
		{fmt.Errorf("x: %w", inspect.ErrNotFound), exitNotFound},
		{fmt.Errorf("x: %w", inspect.ErrActive), exitRefused},
		{fmt.Errorf("x: %w", errRefused), exitRefused},
		{fmt.Errorf("x: %w", inspect.ErrResizeRunning), exitRefused},
		{fmt.Errorf("x: %w", inspect.ErrInvalidArgument), exitUsage},
		{fmt.Errorf("unknown command %q for %q", "x", "hourglass"), exitUsage},
		{fmt.Errorf("redis down"), exitFailed},
	} {
		if got := exitCode(c.err); got != c.want {
			t.Errorf("%v: exit %d, want %d", c.err, got, c.want)
		}
	}
}

func TestParseWhen(t *testing.T) {
	t.Parallel()
	now := time.Now()
	ago, err := parseWhen("1h", true)
	if err != nil || ago.After(now.Add(-time.Hour+time.Minute)) || ago.Before(now.Add(-time.Hour-time.Minute)) {
		t.Errorf("1h ago: %v %v", ago, err)
	}
	later, err := parseWhen("10m", false)
	if err != nil || later.Before(now.Add(9*time.Minute)) {
		t.Errorf("in 10m: %v %v", later, err)
	}
	abs, err := parseWhen("2026-01-02T03:04:05Z", true)
	if err != nil || abs.Unix() != 1767323045 {
		t.Errorf("absolute: %v %v", abs, err)
	}
	if _, err := parseWhen("yesterday", true); exitCode(err) != exitUsage {
		t.Errorf("garbage: %v", err)
	}
}

// TestUsageErrorsNeedNoRedis: bad flags and arguments fail before any
// connection, with exit code 2.
func TestUsageErrorsNeedNoRedis(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"-o", "yaml", "queue", "ls"},
		{"queue", "show"},
		{"queue", "nope"},
		{"dlq", "replay", "--at", "soon", "x"},
		{"dlq", "purge"},
		{"task", "ls", "--limit", "many"},
		{"--set", "no_such_key=1", "queue", "ls"},
		{"shards", "nope"},
		{"shards", "resize"},
		{"shards", "resize", "many"},
		{"shards", "resize", "0"},
		{"shards", "resize", "8", "--timeout", "soon"},
	} {
		var out, errOut bytes.Buffer
		if code := run(args, strings.NewReader(""), &out, &errOut); code != exitUsage || !strings.HasPrefix(errOut.String(), "hourglass: ") {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut.String())
		}
	}
}

// TestQueueResumeOfAnUnknownQueueIsNotFound (issue 24, item 12): queue
// resume of a name no shard registers printed "resumed nosuch" and exited
// 0, while pause exits 3. Now both say the queue is not registered and
// exit 3; a registered queue still resumes, paused or not.
func TestQueueResumeOfAnUnknownQueueIsNotFound(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t, "resume")
	for _, verb := range []string{"pause", "resume"} {
		out, errOut, code := e.cli("queue", verb, "nosuch")
		if code != exitNotFound || out != "" || errOut != "hourglass: queue \"nosuch\" is not registered\n" {
			t.Errorf("queue %s nosuch: exit %d, stdout %q, stderr %q; want exit 3 saying it is not registered", verb, code, out, errOut)
		}
	}
	for _, verb := range []string{"resume", "pause", "resume"} {
		if out, errOut, code := e.cli("queue", verb, "q"); code != exitOK || !strings.HasSuffix(out, " q\n") {
			t.Errorf("queue %s q: exit %d, stdout %q, stderr %q", verb, code, out, errOut)
		}
	}
}

// TestErrorsSayWhatOnce (issue 24, item 12): errors stacked their
// prefixes ("hourglass: inspect: not found: hourglass: task not found",
// "hourglass: usage: ...", "hourglass: refused: ...") and the
// confirmation of a filtered purge printed the filter as a Go struct.
// Each now reads "hourglass: " and what happened, once, with its exit
// code unchanged.
func TestErrorsSayWhatOnce(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t, "errs")
	for _, c := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"task", "show", "nosuch"}, exitNotFound, `task not found: "nosuch"`},
		{[]string{"task", "cancel", "nosuch"}, exitNotFound, `task not found: "nosuch"`},
		{[]string{"dlq", "show", "nosuch"}, exitNotFound, `task not found: "nosuch"`},
		{[]string{"dlq", "replay", "nosuch"}, exitNotFound, `no dead letter "nosuch"`},
		{[]string{"dlq", "purge", "nosuch"}, exitNotFound, `no dead letter "nosuch"`},
		{[]string{"queue", "show", "nosuch"}, exitNotFound, `queue "nosuch" not found`},
		{[]string{"queue", "rm", "nosuch", "--yes"}, exitNotFound, `queue "nosuch" is not registered`},
		{[]string{"queue", "set", "bad/name"}, exitUsage, `invalid argument: queue name "bad/name"`},
		{[]string{"task", "ls", "--state", "bogus"}, exitUsage, `invalid state "bogus" (want scheduled, ready, active or dead)`},
		{[]string{"task", "ls", "--state", "dead", "--cursor", "zz"}, exitUsage, `malformed cursor`},
		{[]string{"-o", "yaml", "queue", "ls"}, exitUsage, `-o "yaml": want table or json`},
		{[]string{"task", "show"}, exitUsage, `task show takes 1 argument(s), got 0 (usage: hourglass task show ID [flags])`},
		{[]string{"--set", "shards=x", "queue", "ls"}, exitUsage, `config: shards: expected an integer, got "x" (-set shards)`},
		{[]string{"queue", "rm", "q"}, exitRefused, `remove queue "q" (new enqueues are refused) needs confirmation: pass --yes (stdin is not a terminal)`},
		{[]string{"dlq", "purge", "--queue", "q", "--reason", "lease expired", "--error", "boom"}, exitRefused,
			`purge the dead letters of queue "q", with reason "lease expired", whose last error contains "boom" needs confirmation: pass --yes (stdin is not a terminal)`},
	} {
		out, errOut, code := e.cli(c.args...)
		if want := "hourglass: " + c.stderr + "\n"; code != c.code || out != "" || errOut != want {
			t.Errorf("%v: exit %d, stdout %q, stderr\n %q\nwant exit %d, stderr\n %q", c.args, code, out, errOut, c.code, want)
		}
	}
}

// TestBadTLSFilesExit2 (issue 24, item 12): a TLS file that is missing or
// not PEM made every verb exit 1 with "connect: redis: tls: ca_file: ...",
// read only when connecting. Like any bad config it now exits 2 before
// connecting, naming the key, the file and where the key was set.
func TestBadTLSFilesExit2(t *testing.T) {
	t.Parallel()
	garbage := filepath.Join(t.TempDir(), "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not PEM\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--set", "redis.tls.enabled=true", "--set", "redis.tls.ca_file=/no/such/ca.pem", "queue", "ls"},
			"hourglass: config: redis.tls.ca_file: open /no/such/ca.pem: no such file or directory (-set redis.tls.ca_file)\n"},
		{[]string{"--set", "etcd.tls.enabled=true", "--set", "etcd.tls.ca_file=" + garbage, "shards"},
			"hourglass: config: etcd.tls.ca_file: " + garbage + " holds no PEM certificate (-set etcd.tls.ca_file)\n"},
	} {
		var out, errOut bytes.Buffer
		if code := run(c.args, strings.NewReader(""), &out, &errOut); code != exitUsage || errOut.String() != c.want {
			t.Errorf("%v: exit %d, stderr\n %q\nwant exit 2, stderr\n %q", c.args, code, errOut.String(), c.want)
		}
	}
}

// TestGoFlags: the binaries' one-dash flags work here too; other flags
// and everything after "--" are left alone.
func TestGoFlags(t *testing.T) {
	t.Parallel()
	got := goFlags([]string{"-config", "a.yaml", "-set=x=1", "-version", "-o", "json", "-c", "b", "--set", "y=2", "--", "-config"})
	want := []string{"--config", "a.yaml", "--set=x=1", "--version", "-o", "json", "-c", "b", "--set", "y=2", "--", "-config"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("goFlags:\n got %q\nwant %q", got, want)
	}
}

// TestTaskRescheduleAndReplace: the CLI's verbs (reschedule, replace,
// priority) change a pending task in place and say what they did; unknown ids exit 3, dead letters exit 4.
func TestTaskRescheduleAndReplace(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t, "change")
	ctx := testenv.Ctx(t, 10*time.Second)
	at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	if r := e.store.Enqueue(ctx, shard.EnqueueArgs{ID: "order-9", Queue: "q", Payload: []byte("old"), Due: at, MaxRetries: -1}); r.Err != nil {
		t.Fatal(r.Err)
	}
	later := at.Add(30 * time.Minute)
	out, errOut, code := e.cli("-o", "json", "task", "reschedule", "order-9", "--at", later.Format(time.RFC3339Nano))
	var act struct {
		Action, ID string
		Due        time.Time
	}
	if err := json.Unmarshal([]byte(out), &act); code != exitOK || err != nil || act.Action != "rescheduled" || act.ID != "order-9" || !act.Due.Equal(later) {
		t.Errorf("task reschedule: exit %d, stdout %q, stderr %q (%v)", code, out, errOut, err)
	}
	payload := filepath.Join(t.TempDir(), "p")
	if err := os.WriteFile(payload, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := e.cli("task", "replace", "order-9", "--payload-file", payload); code != exitOK || out != "replaced the payload of order-9\n" {
		t.Errorf("task replace: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	info, err := e.store.Lookup(ctx, "order-9")
	if err != nil || !info.At.Equal(later) || string(info.Task.Payload) != "new" {
		t.Errorf("the task after the verbs: %+v, %v", info, err)
	}
	if _, _, code := e.cli("task", "reschedule", "nosuch", "--at", "10m"); code != exitNotFound {
		t.Errorf("reschedule of an unknown id: exit %d, want %d", code, exitNotFound)
	}
	if _, _, code := e.cli("task", "replace", "order-9"); code != exitUsage {
		t.Errorf("replace without a payload: exit %d, want %d", code, exitUsage)
	}
	if out, errOut, code := e.cli("task", "priority", "order-9", "high"); code != exitOK || out != "set the priority to high of order-9\n" {
		t.Errorf("task priority: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if out, _, code := e.cli("task", "show", "order-9"); code != exitOK || !strings.Contains(out, "priority") || !strings.Contains(out, "high") {
		t.Errorf("task show after the priority: exit %d, stdout %q", code, out)
	}
	if info, err := e.store.Lookup(ctx, "order-9"); err != nil || info.Task.Priority != shard.PriorityHigh || string(info.Task.Payload) != "new" {
		t.Errorf("the task after task priority: %+v, %v", info.Task, err)
	}
	if _, _, code := e.cli("task", "priority", "order-9", "urgent"); code != exitUsage {
		t.Errorf("an unknown level: exit %d, want %d", code, exitUsage)
	}
	// A traced task shows its trace id (docs/tracing.md).
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	if r := e.store.Enqueue(ctx, shard.EnqueueArgs{ID: "traced", Queue: "q", Delay: time.Hour, MaxRetries: -1, TraceParent: "00-" + traceID + "-00f067aa0ba902b7-01"}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if out, _, code := e.cli("task", "show", "traced"); code != exitOK || !strings.Contains(out, "trace id") || !strings.Contains(out, traceID) {
		t.Errorf("task show of a traced task: exit %d, stdout %q", code, out)
	}
}
