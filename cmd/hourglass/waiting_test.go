package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestResizeNamesTheQueuesThatKeepItOpen (issue 24, item 8): with a
// paused queue's ready tasks in the shards, shards resize started at
// once, then printed "0 tasks/s" until its timeout, and shards layout did
// not say why. Now resize warns before it starts, naming the queue, and
// asks (refused without a terminal unless --yes); its progress, and
// shards layout, name the queue and the shard that waits for it. No
// scheduler runs here, so the change stays open.
func TestResizeNamesTheQueuesThatKeepItOpen(t *testing.T) {
	t.Parallel()
	r := testenv.StartRedis(t)
	body := fmt.Sprintf("redis:\n  addr: %s\netcd:\n  endpoints: [http://127.0.0.1:1]\nnamespace: stuck\nshards: 2\n", r.Addr)
	cfg := writeConfig(t, body)
	cli := cliWith(t, cfg)
	ctx := testenv.Ctx(t, time.Minute)
	l, err := shard.NewLayout("stuck", 2)
	if err != nil {
		t.Fatal(err)
	}
	store := shard.NewStore(r.Client(t), l)
	if err := store.RegisterQueues(ctx, map[string]shard.QueuePolicy{"mail": {MaxRetries: 3, Timeout: time.Minute, MaxPayload: 1024}}); err != nil {
		t.Fatal(err)
	}
	args := make([]shard.EnqueueArgs, 20)
	for k := range args {
		args[k] = shard.EnqueueArgs{ID: fmt.Sprintf("m%d", k), Queue: "mail", MaxRetries: -1}
	}
	for _, res := range store.EnqueueBatch(ctx, args) {
		if res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	for sh := range 2 {
		if _, err := store.Move(ctx, sh, 1, 100); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := store.SetPaused(ctx, "mail", true); err != nil {
		t.Fatal(err)
	}

	_, errOut, code := cli("shards", "resize", "4", "--no-wait")
	if code != exitRefused || !strings.Contains(errOut, "queue mail: 20 ready tasks, paused") || !strings.Contains(errOut, "--yes") {
		t.Fatalf("resize without --yes: exit %d\n%s", code, errOut)
	}
	_, errOut, code = cli("shards", "resize", "4", "--yes", "--timeout", "1500ms")
	if code != exitFailed || !strings.Contains(errOut, "shard 0 waits for queue mail:") || !strings.Contains(errOut, "ready (paused") {
		t.Fatalf("resize --yes: exit %d, want 1 after the timeout naming the waiting queue\n%s", code, errOut)
	}
	out, errOut, code := cli("shards", "layout")
	if code != exitOK || !strings.Contains(out, "waits for queue mail:") {
		t.Fatalf("shards layout: exit %d\n%s%s", code, out, errOut)
	}
}
