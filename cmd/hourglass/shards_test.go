package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// shardRows counts the rows of the shards table (those starting with a
// shard number).
func shardRows(out string) int {
	return len(regexp.MustCompile(`(?m)^\d+ `).FindAllString(out, -1))
}

// TestShardsResize runs shards and shards resize in process against a
// real Redis and etcd, with the test in the owners' place (it records
// the shards done, as their reshard loops do): shards shows the layout
// above the table; resize --no-wait starts a change that shards then
// shows resharding over the 8 shards, and a second resize is refused with
// exit 4; a waiting resize prints the progress and returns once the test
// ended the change, with the total; a waiting resize whose --timeout runs
// out exits 1 saying the change goes on.
func TestShardsResize(t *testing.T) {
	t.Parallel()
	r := testenv.StartRedis(t)
	etcd := testenv.StartEtcd(t)
	body := fmt.Sprintf("redis:\n  addr: %s\netcd:\n  endpoints: [%s]\nnamespace: clitest\nshards: 4\n", r.Addr, etcd.Endpoint)
	cfg := writeConfig(t, body)
	cli := cliWith(t, cfg)
	ctx := testenv.Ctx(t, time.Minute)
	l, err := shard.NewLayout("clitest", 4)
	if err != nil {
		t.Fatal(err)
	}
	store := shard.NewStore(r.Client(t), l)
	if err := store.RegisterQueues(ctx, map[string]shard.QueuePolicy{"default": {MaxRetries: 3, Timeout: time.Minute, MaxPayload: 1024}}); err != nil {
		t.Fatal(err)
	}
	args := make([]shard.EnqueueArgs, 100)
	for k := range args {
		args[k] = shard.EnqueueArgs{ID: fmt.Sprintf("t%d", k), Queue: "default", Delay: time.Hour, MaxRetries: -1}
	}
	for _, res := range store.EnqueueBatch(ctx, args) {
		if res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	// completeChange records every shard of the running change done.
	completeChange := func() {
		t.Helper()
		l, err := store.RefreshLayout(ctx)
		if err != nil || !l.Resharding() {
			t.Fatalf("no change runs: %+v %v", l, err)
		}
		for sh := range l.Existing() {
			if _, err := store.ShardDone(ctx, l, sh); err != nil {
				t.Fatal(err)
			}
		}
	}

	out, errOut, code := cli("shards")
	if code != exitOK || !strings.HasPrefix(out, "layout: generation 0, 4 shards, stable (never resized)\n") || shardRows(out) != 4 {
		t.Fatalf("shards before a change: exit %d\n%s%s", code, out, errOut)
	}

	out, errOut, code = cli("-o", "json", "shards", "resize", "8", "--no-wait", "--yes")
	var st inspect.LayoutStatus
	if code != exitOK || json.Unmarshal([]byte(out), &st) != nil || st.State != inspect.LayoutResharding || st.Generation != 1 || st.Span != 8 {
		t.Fatalf("resize 8 --no-wait: exit %d %+v\n%s%s", code, st, out, errOut)
	}
	out, errOut, code = cli("shards")
	if code != exitOK || !strings.HasPrefix(out, "layout: generation 1, 8 shards, resharding 4 -> 8: 0/8 shards done, 0 tasks moved\n") || shardRows(out) != 8 {
		t.Fatalf("shards during the change: exit %d\n%s%s", code, out, errOut)
	}
	var shards []inspect.Shard
	if out, _, code = cli("-o", "json", "shards"); code != exitOK || json.Unmarshal([]byte(out), &shards) != nil || len(shards) != 8 {
		t.Fatalf("shards -o json during the change: exit %d\n%s", code, out)
	}
	if out, errOut, code = cli("shards", "layout"); code != exitOK || !strings.Contains(out, "resharding 4 -> 8") || strings.Count(out, "pending") != 4 {
		t.Fatalf("shards layout: exit %d\n%s%s", code, out, errOut)
	}
	_, errOut, code = cli("shards", "resize", "16", "--timeout", "5s") // bounded, should the refusal fail
	if code != exitRefused || !strings.Contains(errOut, "another change of the shard count is running (generation 1, resharding 4 -> 8") {
		t.Fatalf("resize while a change runs: exit %d: %s", code, errOut)
	}
	completeChange()
	if out, _, code = cli("shards"); code != exitOK || !strings.HasPrefix(out, "layout: generation 1, 8 shards, stable\n") || shardRows(out) != 8 {
		t.Fatalf("shards after the change: exit %d\n%s", code, out)
	}
	if out, _, code = cli("shards", "resize", "8", "--timeout", "5s"); code != exitOK || !strings.Contains(out, "has 8 shards already") {
		t.Fatalf("resize to the current count: exit %d\n%s", code, out)
	}

	// A change of the placement rule alone (same count).
	out, errOut, code = cli("shards", "resize", "8", "--placement", "key", "--no-wait", "--yes")
	if code != exitOK || !strings.Contains(out, "generation 2, resharding 8 by id -> 8 by key") {
		t.Fatalf("resize 8 --placement key: exit %d\n%s%s", code, out, errOut)
	}
	completeChange()
	if out, _, code = cli("shards", "layout"); code != exitOK || !regexp.MustCompile(`(?m)^placement +by key$`).MatchString(out) {
		t.Fatalf("shards layout after the change of rule: exit %d\n%s", code, out)
	}
	if out, _, code = cli("shards", "resize", "8", "--placement", "key"); code != exitOK || !strings.Contains(out, "has 8 shards already, placed by key") {
		t.Fatalf("resize to the current count and rule: exit %d\n%s", code, out)
	}
	if _, errOut, code = cli("shards", "resize", "8", "--placement", "tenant"); code != exitUsage || !strings.Contains(errOut, `--placement "tenant": want id or key`) {
		t.Fatalf("resize --placement tenant: exit %d: %s", code, errOut)
	}

	// A waiting resize: progress, then the total once the change ends.
	var wout, werr testenv.Buffer
	exited := make(chan int, 1)
	go func() {
		exited <- run([]string{"--config", cfg, "shards", "resize", "2", "--yes", "--timeout", "1m"}, strings.NewReader(""), &wout, &werr)
	}()
	testenv.WaitFor(t, 10*time.Second, "the change to 2 shards started", func() (bool, string) {
		r, err := store.ReadLayout(ctx)
		return err == nil && r.Gen == 3 && r.State == shard.LayoutResharding, fmt.Sprintf("%+v %v", r, err)
	})
	l, err = store.RefreshLayout(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, sh := range []int{5, 6, 7} {
		if _, err := store.ShardDone(ctx, l, sh); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.AddMoved(ctx, l, 1500); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "a progress line", func() (bool, string) {
		return strings.Contains(werr.String(), "generation 3, resharding 8 -> 2: 3/8 shards done, 1,500 tasks moved ("), werr.String()
	})
	select {
	case c := <-exited:
		t.Fatalf("resize returned (exit %d) while the change runs: %s%s", c, wout.String(), werr.String())
	default:
	}
	completeChange()
	select {
	case c := <-exited:
		if c != exitOK || !strings.HasPrefix(wout.String(), "done: 8 -> 2 shards (generation 3): 1,500 tasks moved in ") {
			t.Fatalf("waiting resize: exit %d\n%s%s", c, wout.String(), werr.String())
		}
		t.Logf("a waiting resize printed:\n%s%s", werr.String(), wout.String())
	case <-time.After(10 * time.Second):
		t.Fatalf("resize still waits after the change ended: %s", werr.String())
	}

	// A wait bounded by --timeout that runs out: exit 1, the change goes on.
	start := time.Now()
	var terr testenv.Buffer
	go func() {
		exited <- run([]string{"--config", cfg, "shards", "resize", "3", "--yes", "--timeout", "1500ms"}, strings.NewReader(""), &bytes.Buffer{}, &terr)
	}()
	select {
	case c := <-exited:
		if took := time.Since(start); c != exitFailed || !strings.Contains(terr.String(), "stopped waiting (--timeout 1.5s reached); the change goes on") || took < 1500*time.Millisecond {
			t.Fatalf("resize --timeout 1500ms: exit %d after %s: %s", c, took, terr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("resize --timeout 1500ms still waits after 15 s: %s", terr.String())
	}
	if out, _, code = cli("shards"); code != exitOK || !strings.Contains(out, "resharding 2 -> 3") {
		t.Fatalf("shards after the wait ran out: exit %d\n%s", code, out)
	}
}

// terminal returns the two ends of a new pseudo-terminal: what is
// written to the first, the second reads as typed input. It skips the
// test where the system has no pseudo-terminals.
func terminal(t *testing.T) (keyboard, tty *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return m, s
}

// TestResizeAsksBeforeStarting (issue 24, item 12): shards resize started
// a change at once, even with stdin not a terminal, while queue rm and
// dlq purge ask. It now asks before it starts a change: without a
// terminal it is refused (exit 4) unless --yes, and nothing changes; on a
// terminal "n" refuses and "y" starts it. A resize that starts nothing
// (another change runs, or the count is the current one) does not ask.
func TestResizeAsksBeforeStarting(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t, "ask")
	ctx := testenv.Ctx(t, 30*time.Second)
	generation := func() int64 {
		t.Helper()
		r, err := e.store.ReadLayout(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return r.Gen
	}
	const question = "change the shard count from 2 to 4 (tasks move between shards; once started, the change runs to its end)"
	out, errOut, code := e.cli("shards", "resize", "4", "--no-wait")
	if code != exitRefused || out != "" || errOut != "hourglass: "+question+" needs confirmation: pass --yes (stdin is not a terminal)\n" || generation() != 0 {
		t.Fatalf("resize without a terminal or --yes: exit %d, generation %d\n%s%s", code, generation(), out, errOut)
	}
	if out, errOut, code := e.cli("shards", "resize", "2"); code != exitOK || !strings.Contains(out, "has 2 shards already") {
		t.Fatalf("resize to the current count: exit %d\n%s%s", code, out, errOut)
	}

	keyboard, tty := terminal(t)
	for _, answer := range []string{"n", "y"} {
		if _, err := keyboard.WriteString(answer + "\n"); err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		code := run([]string{"--config", e.cfg, "shards", "resize", "4", "--no-wait"}, tty, &out, &errOut)
		want, gen := exitRefused, int64(0)
		if answer == "y" {
			want, gen = exitOK, 1
		}
		if code != want || !strings.HasPrefix(errOut.String(), question+"? [y/N] ") || generation() != gen {
			t.Fatalf("resize answered %q on a terminal: exit %d, generation %d\n%s%s", answer, code, generation(), out.String(), errOut.String())
		}
	}
	// Another change runs: refused for that, without a question.
	if _, errOut, code := e.cli("shards", "resize", "8", "--no-wait"); code != exitRefused || !strings.HasPrefix(errOut, "hourglass: another change of the shard count is running") {
		t.Fatalf("resize while a change runs: exit %d\n%s", code, errOut)
	}
}

func TestThousands(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{0: "0", 7: "7", 999: "999", 1000: "1,000", 45210: "45,210", 1234567: "1,234,567", -1500: "-1,500"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}
