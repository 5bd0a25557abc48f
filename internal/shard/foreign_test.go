package shard_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestForeignConsumer is a consumer written from docs/protocol.md and the
// scripts' headers alone, as one in another language would be: raw
// BLMPOP on the documented keys, then claim, extend, ack and nack with
// the scripts assembled as documented (lib.lua, a newline, the script),
// sent with EVAL. Only the producing side (enqueue and move) and the
// final check use the Go code.
func TestForeignConsumer(t *testing.T) {
	t.Parallel()
	e := shardtest.New(t, shardtest.Options{Namespace: "foreign", Shards: 1})
	e.Ready("q", "f-ack", "f-nack")
	ctx := testenv.Ctx(t, 30*time.Second)
	rdb := e.RDB
	tag := "{foreign:0}"
	key := func(name string) string { return tag + ":" + name }
	script := func(name string) string {
		lib, err := os.ReadFile("lua/lib.lua")
		if err != nil {
			t.Fatal(err)
		}
		src, err := os.ReadFile("lua/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return string(lib) + "\n" + string(src)
	}

	// As the docs warn, a script other than enqueue.lua fails without
	// lib.lua in front of it.
	src, err := os.ReadFile("lua/claim.lua")
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.Eval(ctx, string(src), []string{key("tasks"), key("inflight"), key("leases"), key("pending:q"), key("dead"), key("dead:info"), key("counts")}, "", "1|x").Err(); err == nil || !strings.Contains(err.Error(), "nonexistent global variable") {
		t.Errorf("claim.lua alone: %v, want the error the docs describe", err)
	}

	// Fetch: pop both entries "seq|id|task".
	_, entries, err := rdb.BLMPop(ctx, time.Second, "LEFT", 10, key("ready:q")).Result()
	if err != nil || len(entries) != 2 {
		t.Fatalf("BLMPOP: %v %v", entries, err)
	}
	tokens := map[string]string{}
	for _, entry := range entries {
		parts := strings.SplitN(entry, "|", 3)
		if len(parts) != 3 {
			t.Fatalf("entry %q is not seq|id|task", entry)
		}
		// Lease: claim.lua with the entry's "seq|id".
		res, err := rdb.Eval(ctx, script("claim.lua"),
			[]string{key("tasks"), key("inflight"), key("leases"), key("pending:q"), key("dead"), key("dead:info"), key("counts")},
			"", parts[0]+"|"+parts[1]).Slice()
		if err != nil || len(res) != 5 || res[1] != parts[1] {
			t.Fatalf("claim %s: %v %v", parts[1], res, err)
		}
		tokens[parts[1]] = fmt.Sprint(res[2])
	}

	// Extend: the new deadline is about 60 s from now.
	deadline, err := rdb.Eval(ctx, script("extend.lua"), []string{key("inflight"), key("leases")}, "f-ack", tokens["f-ack"], 60000).Int64()
	if err != nil || time.Until(time.UnixMilli(deadline)) < 50*time.Second {
		t.Fatalf("extend: %d %v", deadline, err)
	}

	// Ack one (a leased delivery: queue "").
	acked, err := rdb.Eval(ctx, script("ack.lua"), []string{key("tasks"), key("inflight"), key("leases"), key("errors"), key("counts")},
		key("pending:"), "f-ack", tokens["f-ack"], "").Int64Slice()
	if err != nil || len(acked) != 1 || acked[0] != 1 {
		t.Fatalf("ack: %v %v", acked, err)
	}

	// Nack the other: rescheduled with the queue's backoff.
	nacked, err := rdb.Eval(ctx, script("nack.lua"),
		[]string{key("delayed"), key("tasks"), key("inflight"), key("leases"), key("errors"), key("dead"), key("dead:info"), key("queues"), key("counts")},
		"f-nack", tokens["f-nack"], "boom", "retry", "", "", "0.5", key("wake")).Int64Slice()
	if err != nil || len(nacked) != 3 || nacked[0] != 1 || nacked[2] != 1 {
		t.Fatalf("nack: %v %v", nacked, err)
	}

	// A stale token changes nothing.
	if stale, err := rdb.Eval(ctx, script("extend.lua"), []string{key("inflight"), key("leases")}, "f-ack", tokens["f-ack"], 1000).Int64(); err != nil || stale != 0 {
		t.Fatalf("extend after ack: %d %v, want 0 (stale)", stale, err)
	}

	if _, err := e.Lookup("f-ack"); !errors.Is(err, shard.ErrNotFound) {
		t.Errorf("f-ack after its ack: %v, want not found", err)
	}
	info, err := e.Lookup("f-nack")
	if err != nil || info.State != "scheduled" || info.Task.Attempts != 1 {
		t.Errorf("f-nack after its nack: %+v %v; want scheduled, 1 attempt", info, err)
	}
	// The counts the scripts kept: f-nack scheduled again, nothing leased.
	counts, err := rdb.HGetAll(ctx, key("counts")).Result()
	if err != nil || counts["s|q"] != "1" || counts["l|q"] != "0" {
		t.Errorf("counts %v %v, want s|q 1 and l|q 0", counts, err)
	}
}
