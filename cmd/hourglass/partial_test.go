package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestReadsShowTheRestWhenAShardIsCorrupt: a ready list of the wrong type
// in shard 1 made queue ls, stats and shards exit 1 with nothing shown.
// They now print every other shard's counts, warn on stderr naming shard
// 1 and the reason, and exit 5 (docs/cli.md).
func TestReadsShowTheRestWhenAShardIsCorrupt(t *testing.T) {
	t.Parallel()
	r := testenv.StartRedis(t)
	body := fmt.Sprintf("redis:\n  addr: %s\netcd:\n  endpoints: [http://127.0.0.1:1]\n  dial_timeout: 200ms\nnamespace: bad\nshards: 2\n", r.Addr)
	cfg := writeConfig(t, body)
	ctx := testenv.Ctx(t, 30*time.Second)
	l, err := shard.NewLayout("bad", 2)
	if err != nil {
		t.Fatal(err)
	}
	rdb := r.Client(t)
	store := shard.NewStore(rdb, l)
	if err := store.RegisterQueues(ctx, map[string]shard.QueuePolicy{"default": {MaxRetries: 3, Timeout: time.Minute, MaxPayload: 1024}}); err != nil {
		t.Fatal(err)
	}
	var args []shard.EnqueueArgs
	for k := 0; len(args) < 3; k++ {
		if id := fmt.Sprintf("t%d", k); l.ShardOf(id) == 0 {
			args = append(args, shard.EnqueueArgs{ID: id, Queue: "default", Delay: time.Hour, MaxRetries: -1})
		}
	}
	for _, res := range store.EnqueueBatch(ctx, args) {
		if res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	if err := rdb.Set(ctx, l.Ready(1, "default"), "garbage", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for _, verb := range [][]string{{"queue", "ls"}, {"stats"}, {"shards"}} {
		var out, errOut bytes.Buffer
		code := run(append([]string{"--config", cfg}, verb...), strings.NewReader(""), &out, &errOut)
		if code != exitPartial {
			t.Fatalf("%v: exit %d, want %d\n%s%s", verb, code, exitPartial, out.String(), errOut.String())
		}
		if !strings.Contains(errOut.String(), "shard 1: WRONGTYPE") {
			t.Fatalf("%v: stderr does not name the shard: %s", verb, errOut.String())
		}
		if verb[0] != "shards" && !strings.Contains(out.String(), "default") {
			t.Fatalf("%v: the readable shard's queue is missing:\n%s", verb, out.String())
		}
		if verb[0] == "shards" && !strings.Contains(out.String(), "\n0 ") {
			t.Fatalf("shards: shard 0 is missing:\n%s", out.String())
		}
	}
}
