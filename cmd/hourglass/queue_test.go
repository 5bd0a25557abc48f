package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestEmptyNamespaceSaysSo (issue 24, item 12): with a namespace that
// holds nothing (a typo, or the config of another deployment), queue ls,
// stats, task ls and dlq ls printed an empty table and exited 0 with no
// hint. They still print it and exit 0 (an empty namespace may be a new
// deployment), stdout unchanged and machine-readable, but warn on stderr
// naming the namespace, the config key and the namespaces in use on this
// Redis. A namespace that holds queues gets no warning for an empty
// listing.
func TestEmptyNamespaceSaysSo(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t, "real")
	const warning = `hourglass: warning: namespace "nosuch" has no queue registered and no task stored; namespaces with queues on this Redis: real (the config key namespace: --set namespace=NAME, HOURGLASS_NAMESPACE, or namespace: in the file of -c)` + "\n"
	for _, args := range [][]string{
		{"queue", "ls"},
		{"stats"},
		{"task", "ls", "--state", "scheduled"},
		{"dlq", "ls"},
		{"-o", "json", "queue", "ls"},
		{"-o", "json", "dlq", "ls", "--all"},
	} {
		out, errOut, code := e.cli(append([]string{"--set", "namespace=nosuch"}, args...)...)
		if code != exitOK || errOut != warning {
			t.Errorf("%v in an empty namespace: exit %d, stderr\n %q\nwant exit 0, stderr\n %q", args, code, errOut, warning)
		}
		if args[0] == "-o" && !json.Valid([]byte(out)) {
			t.Errorf("%v: stdout is not JSON: %q", args, out)
		}
		if args[0] != "-o" && strings.Contains(out, "warning") {
			t.Errorf("%v: the warning reached stdout: %q", args, out)
		}
		out, errOut, code = e.cli(args...)
		if code != exitOK || errOut != "" {
			t.Errorf("%v in a namespace with queues: exit %d, stderr %q\n%s", args, code, errOut, out)
		}
	}
}

// TestQueueRecent: queue recent lists a queue's ended tasks newest first,
// with their results, in a table and as JSON; task show shows a
// succeeded task's result; queue show says what a queue keeps.
func TestQueueRecent(t *testing.T) {
	t.Parallel()
	e := shardtest.New(t, shardtest.Options{Namespace: "recent", Queues: map[string]shard.QueuePolicy{
		"q": {MaxRetries: 3, Timeout: time.Minute, Retention: shard.Retention{Age: time.Hour}}, "plain": {MaxRetries: 3, Timeout: time.Minute}}})
	cli := cliWith(t, writeConfig(t, fmt.Sprintf("redis:\n  addr: %s\netcd:\n  endpoints: [http://127.0.0.1:1]\n  dial_timeout: 200ms\nnamespace: recent\nshards: 2\n", e.Redis.Addr)))
	ctx := testenv.Ctx(t, 30*time.Second)
	for i, d := range e.Popped("q", "done", 2) {
		if err := e.Store.Succeed(ctx, d.AckArgs(true), []byte(fmt.Sprintf("result %d", i))); err != nil {
			t.Fatal(err)
		}
	}
	e.Schedule("q", time.Hour, "later")
	if _, err := e.Store.Cancel(ctx, "later"); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := cli("queue", "recent", "q")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != exitOK || len(lines) != 4 || !strings.Contains(out, "cancelled  later") ||
		!strings.Contains(out, "succeeded  done0  result 0") || !strings.Contains(out, "succeeded  done1  result 1") {
		t.Errorf("queue recent: exit %d, stdout:\n%s\nstderr %q; want the cancelled task and both results", code, out, errOut)
	}
	// Newest first (records of one millisecond in the order of their ids).
	out, _, code = cli("-o", "json", "queue", "recent", "q")
	var all struct{ Tasks []inspect.Task }
	if err := json.Unmarshal([]byte(out), &all); code != exitOK || err != nil || len(all.Tasks) != 3 ||
		!slices.IsSortedFunc(all.Tasks, func(a, b inspect.Task) int { return cmp.Or(b.Ended.Compare(a.Ended), strings.Compare(a.ID, b.ID)) }) {
		t.Errorf("queue recent -o json: exit %d, %s (%v); want 3 tasks, newest first", code, out, err)
	}
	out, _, code = cli("-o", "json", "queue", "recent", "q", "--limit", "1")
	var got struct{ Tasks []inspect.Task }
	if err := json.Unmarshal([]byte(out), &got); code != exitOK || err != nil || len(got.Tasks) != 1 || len(all.Tasks) == 0 || got.Tasks[0].ID != all.Tasks[0].ID {
		t.Errorf("queue recent --limit 1 -o json: exit %d, %s (%v); want the newest", code, out, err)
	}
	if out, _, code = cli("task", "show", "done1"); code != exitOK || !strings.Contains(out, "succeeded") || !strings.Contains(out, "result 1") {
		t.Errorf("task show of a succeeded task: exit %d, stdout:\n%s", code, out)
	}
	// queue show says what the queue keeps, in a table and as JSON.
	if out, _, code = cli("queue", "show", "q"); code != exitOK || !strings.Contains(out, "records of ended tasks kept 1h0m0s, at most 10,000 per shard") {
		t.Errorf("queue show of a queue that keeps records: exit %d, stdout:\n%s", code, out)
	}
	out, _, code = cli("-o", "json", "queue", "show", "q")
	var q inspect.Queue
	if err := json.Unmarshal([]byte(out), &q); code != exitOK || err != nil || q.Retention == nil ||
		*q.Retention != (inspect.Retention{Age: time.Hour, Count: shard.DefaultRetentionCount}) {
		t.Errorf("queue show -o json: exit %d, %s (%v); want retention 1h, 10000", code, out, err)
	}
	if out, _, code = cli("queue", "show", "plain"); code != exitOK || !strings.Contains(out, "none: no records of ended tasks") {
		t.Errorf("queue show of a queue that keeps no records: exit %d, stdout:\n%s", code, out)
	}
	if out, _, code = cli("-o", "json", "queue", "show", "plain"); code != exitOK || strings.Contains(out, "retention") {
		t.Errorf("queue show -o json of a queue that keeps no records: exit %d, %s; want no retention", code, out)
	}
}
