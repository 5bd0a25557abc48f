package client_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestDurabilityWaitsForReplicas: with WaitReplicas, an enqueue returns
// nil once a replica holds it, and ErrNotReplicated (the task stored all
// the same) when no replica confirms it in time.
func TestDurabilityWaitsForReplicas(t *testing.T) {
	t.Parallel()
	primary := testenv.StartRedis(t)
	host, port, _ := strings.Cut(primary.Addr, ":")
	replica := testenv.StartRedis(t, testenv.WithRedisArgs("--replicaof", host, port))
	prdb, rrdb := primary.Client(t), replica.Client(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	testenv.WaitFor(t, 10*time.Second, "replica in sync", func() (bool, string) {
		info := rrdb.Info(ctx, "replication").Val()
		return strings.Contains(info, "master_link_status:up"), info
	})
	l, _ := shard.NewLayout("hourglass", 16)
	if err := shard.NewStore(prdb, l).RegisterQueues(ctx, map[string]shard.QueuePolicy{
		"emails": {MaxRetries: 25, Timeout: 30 * time.Second, MaxPayload: 1 << 20},
	}); err != nil {
		t.Fatal(err)
	}
	durable, err := client.New(prdb, client.Config{WaitReplicas: 1, WaitTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	tasks := make([]client.Task, 50)
	for i := range tasks {
		tasks[i] = client.Task{ID: fmt.Sprintf("t%d", i), Queue: "emails", Delay: time.Hour}
	}
	if _, err := durable.EnqueueBatch(ctx, tasks); err != nil {
		t.Fatalf("enqueue with a replica in sync: %v", err)
	}
	rc, err := client.New(rrdb, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range tasks { // acknowledged, so on the replica already
		if _, err := rc.Lookup(ctx, tk.ID); err != nil {
			t.Fatalf("%s not on the replica when the enqueue returned: %v", tk.ID, err)
		}
	}

	// Two replicas asked for, one exists: stored, reported not replicated.
	strict, err := client.New(prdb, client.Config{WaitReplicas: 2, WaitTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := strict.Enqueue(ctx, client.Task{ID: "short", Queue: "emails"}); !errors.Is(err, client.ErrNotReplicated) {
		t.Fatalf("enqueue short of replicas: %v", err)
	}
	if _, err := strict.Lookup(ctx, "short"); err != nil {
		t.Fatalf("the unreplicated task should be stored: %v", err)
	}
	// Found stored, but still not confirmed: both.
	if _, err := strict.Enqueue(ctx, client.Task{ID: "short", Queue: "emails"}); !errors.Is(err, client.ErrDuplicate) || !errors.Is(err, client.ErrNotReplicated) {
		t.Fatalf("sending it again: %v", err)
	}
	// Sent again with one replica asked for: the duplicate is now
	// confirmed (the wait mark's write follows the original store).
	if _, err := durable.Enqueue(ctx, client.Task{ID: "short", Queue: "emails"}); !errors.Is(err, client.ErrDuplicate) || errors.Is(err, client.ErrNotReplicated) {
		t.Fatalf("sending it again, durable: %v", err)
	}
	for _, cfg := range []client.Config{
		{WaitReplicas: -1},
		{WaitReplicas: 1, WaitTimeout: time.Microsecond},
		{WaitReplicas: 1, WaitTimeout: time.Minute}, // beyond go-redis's 3 s read timeout
	} {
		if _, err := client.New(prdb, cfg); !errors.Is(err, client.ErrInvalidConfig) {
			t.Errorf("%+v: %v, want ErrInvalidConfig", cfg, err)
		}
	}
}
