package shard

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestNamespacesListsThoseWithQueues: Namespaces finds every namespace
// whose queues are registered, whatever its shard count, and no other
// key that merely looks like one; a scan that reaches its budget before
// the end of the keys says it is not complete.
func TestNamespacesListsThoseWithQueues(t *testing.T) {
	t.Parallel()
	r := testenv.StartRedis(t)
	rdb := r.Client(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	for ns, n := range map[string]int{"alpha": 1, "beta-2": 16} {
		l, err := NewLayout(ns, n)
		if err != nil {
			t.Fatal(err)
		}
		if err := NewStore(rdb, l).RegisterQueues(ctx, map[string]QueuePolicy{"q": {MaxRetries: 1, Timeout: time.Minute, MaxPayload: 10}}); err != nil {
			t.Fatal(err)
		}
	}
	// Look-alikes: not a namespace's registry.
	for _, key := range []string{"{a:b:0}:queues", "{gamma:0}:queues:x", "x{delta:0}:queues", "{bad ns:0}:queues", "{epsilon}:paused"} {
		if err := rdb.HSet(ctx, key, "q", "1").Err(); err != nil {
			t.Fatal(err)
		}
	}
	names, complete, err := Namespaces(ctx, rdb, 100_000)
	if err != nil || !complete || !slices.Equal(names, []string{"alpha", "beta-2"}) {
		t.Fatalf("Namespaces: %v complete %v, %v; want [alpha beta-2] complete", names, complete, err)
	}

	pipe := rdb.Pipeline()
	for k := range 3 * namespaceScanCount {
		pipe.Set(ctx, fmt.Sprintf("filler:%d", k), "x", 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if _, complete, err := Namespaces(ctx, rdb, namespaceScanCount); err != nil || complete {
		t.Fatalf("a scan over its budget: complete %v, %v; want incomplete", complete, err)
	}
}
