package testenv

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestPlacementAsProducersComputeIt: ShardOf is the placement
// docs/protocol.md gives producers (its example: order-42 is in shard 14
// of 16), and MovingIDs returns ids of the shard asked for that a change
// of the shard count moves elsewhere.
func TestPlacementAsProducersComputeIt(t *testing.T) {
	t.Parallel()
	if sh := ShardOf("order-42", 16); sh != 14 {
		t.Fatalf("ShardOf(order-42, 16) = %d, want 14 (docs/protocol.md)", sh)
	}
	ids := MovingIDs(4, 8, 1, "m", 5)
	if len(ids) != 5 {
		t.Fatalf("MovingIDs: %v", ids)
	}
	for _, id := range ids {
		if ShardOf(id, 4) != 1 || ShardOf(id, 8) == 1 {
			t.Errorf("%s: shard %d of 4, %d of 8; want 1, then another", id, ShardOf(id, 4), ShardOf(id, 8))
		}
	}
}

// TestAfterCommandFollowsTheFirstAnsweredCommand: the hook's function
// runs once, after the first matching command the server ran: not after
// a new connection's handshake, nor after an EVALSHA refused with
// NOSCRIPT (the EVAL that follows is the one), and also after a nil
// reply or inside a pipeline.
func TestAfterCommandFollowsTheFirstAnsweredCommand(t *testing.T) {
	t.Parallel()
	rdb := StartRedis(t).Client(t)
	ctx := Ctx(t, 30*time.Second)

	// Any command: the first one the operation sends is the script's.
	var seen []int64
	h := &AfterCommand{Match: func([]any) bool { return true }, Fn: func() {
		seen = append(seen, rdb.IncrBy(ctx, "k", 0).Val())
	}}
	c := HookedClient(t, rdb, h)
	incr := redis.NewScript(`return redis.call("INCR", KEYS[1])`) // not cached yet: EVALSHA, NOSCRIPT, EVAL
	for range 2 {
		if err := incr.Run(ctx, c, []string{"k"}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if len(seen) != 1 || seen[0] != 1 {
		t.Fatalf("the hook saw k = %v; want once, 1 (after the script's EVAL, not the handshake or the refused EVALSHA)", seen)
	}

	// A nil reply is an answer.
	got := false
	c = HookedClient(t, rdb, &AfterCommand{Match: CommandOn("get", "missing"), Fn: func() { got = true }})
	if err := c.Get(ctx, "missing").Err(); err != redis.Nil || !got {
		t.Fatalf("GET of a missing key: %v, hook ran %v", err, got)
	}

	// In a pipeline: after the matching command, not after one that failed.
	var ran []string
	c = HookedClient(t, rdb, &AfterCommand{Match: func(a []any) bool { n, _ := a[0].(string); return n != "ping" }, Fn: func() {
		ran = append(ran, rdb.Get(ctx, "p").Val())
	}})
	if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.EvalSha(ctx, "0000000000000000000000000000000000000000", nil) // NOSCRIPT
		return nil
	}); err == nil || len(ran) != 0 {
		t.Fatalf("a pipeline of an EVALSHA of no script: %v, hook ran %v times", err, len(ran))
	}
	if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Ping(ctx)
		p.Set(ctx, "p", "set", 0)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(ran) != 1 || ran[0] != "set" {
		t.Fatalf("the hook ran %v after the pipelines; want once, after the SET", ran)
	}
}
