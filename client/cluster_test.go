package client_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestClientOnRedisCluster: producers work on a Redis Cluster today: each
// shard's keys carry its hash tag, so every script call stays in one
// slot, and the shards spread over the primaries. The durability mode is
// refused there.
func TestClientOnRedisCluster(t *testing.T) {
	t.Parallel()
	rc := shardtest.NewCluster(t, shardtest.ClusterOptions{Options: shardtest.Options{Queues: map[string]shard.QueuePolicy{
		"emails": {MaxRetries: 25, Timeout: 30 * time.Second, MaxPayload: 1 << 20},
	}}})
	cc := rc.RDB
	ctx := testenv.Ctx(t, 30*time.Second)
	c, err := client.New(cc, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tasks := make([]client.Task, 200)
	for i := range tasks {
		tasks[i] = client.Task{ID: fmt.Sprintf("c%d", i), Queue: "emails", Delay: time.Duration(i) * time.Minute}
	}
	if _, err := c.EnqueueBatch(ctx, tasks); err != nil {
		t.Fatalf("batch over 16 shards on 3 nodes: %v", err)
	}
	if _, err := c.Enqueue(ctx, tasks[0]); !errors.Is(err, client.ErrDuplicate) {
		t.Fatalf("duplicate: %v", err)
	}
	if info, err := c.Lookup(ctx, "c7"); err != nil || info.State != "scheduled" {
		t.Fatalf("lookup: %+v %v", info, err)
	}
	if st, err := c.Cancel(ctx, "c7"); err != nil || st != client.StateScheduled {
		t.Fatalf("cancel: %q, %v", st, err)
	}
	t.Logf("16 shards over the primaries: %v", rc.Spread()) // all three (NewCluster checks)
	if _, err := client.New(cc, client.Config{WaitReplicas: 1}); !errors.Is(err, client.ErrInvalidConfig) {
		t.Fatalf("durability mode on a cluster: %v", err)
	}
}
