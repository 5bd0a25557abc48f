package shard

import (
	"slices"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// QueueNames lists the registered queues from shard 0, sorted: not the
// far tier's settings kept in the same hash, not a removed queue that
// still drains, and nothing for a namespace no scheduler registered.
func TestQueueNames(t *testing.T) {
	t.Parallel()
	s, rdb := newTestStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	if err := s.RegisterQueues(ctx, map[string]QueuePolicy{"audit": {MaxRetries: 1, Timeout: time.Second, MaxPayload: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetFarTier(ctx, FarTier{Bucket: time.Minute, Lead: 15 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveQueue(ctx, "audit"); err != nil {
		t.Fatal(err)
	}
	names, err := s.QueueNames(ctx)
	if err != nil || !slices.Equal(names, []string{"default", "mail"}) {
		t.Fatalf("queue names %q (%v), want default and mail", names, err)
	}
	l, _ := NewLayout("elsewhere", 1)
	if names, err := NewStore(rdb, l).QueueNames(ctx); err != nil || len(names) != 0 {
		t.Fatalf("queue names of an unused namespace: %q (%v)", names, err)
	}
}
