package inspect_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass"
	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// recoverAll runs one recovery pass on every shard, as the owners do.
func recoverAll(t *testing.T, e *shardtest.Env) {
	t.Helper()
	for sh := range e.Layout().Shards() {
		if _, err := e.Store.Recover(testenv.Ctx(t, 10*time.Second), sh, shardtest.Epoch, shard.RecoverArgs{Limit: 100}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestQueueRegistryAtRunTime: a queue added at run time takes enqueues at
// once; a change of policy applies to the next enqueue; a removed queue
// refuses enqueues (the client says why) while its stored tasks drain,
// and its registration disappears once they are gone.
func TestQueueRegistryAtRunTime(t *testing.T) {
	t.Parallel()
	e, in := newInspector(t, 4)
	ctx := testenv.Ctx(t, 30*time.Second)
	cl, err := client.New(e.RDB, client.Config{Namespace: "insp", Shards: 4, RetryFor: client.RetryForNone})
	if err != nil {
		t.Fatal(err)
	}
	enqueue := func(id string) error {
		_, err := cl.Enqueue(ctx, client.Task{ID: id, Queue: "fresh", Payload: []byte("x")})
		return err
	}
	if err := enqueue("before"); !errors.Is(err, client.ErrUnknownQueue) {
		t.Fatalf("enqueue before the queue exists: %v", err)
	}
	if err := in.SetQueue(ctx, "fresh", inspect.Policy{MaxRetries: hourglass.Retries(2)}); err != nil {
		t.Fatal(err)
	}
	if err := enqueue("one"); err != nil {
		t.Fatal(err)
	}
	if err := in.SetQueue(ctx, "fresh", inspect.Policy{MaxRetries: hourglass.Retries(7), Timeout: 3 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if err := enqueue("two"); err != nil {
		t.Fatal(err)
	}
	one, _ := in.Task(ctx, "one")
	two, _ := in.Task(ctx, "two")
	if one.MaxRetries != 2 || two.MaxRetries != 7 || two.Timeout != 3*time.Second {
		t.Fatalf("policies applied: one %+v, two %+v", one, two)
	}
	q, err := in.Queue(ctx, "fresh")
	if err != nil || q.State != inspect.QueueActive || q.Policy.MaxRetries == nil || *q.Policy.MaxRetries != 7 || q.Counts.Scheduled != 2 {
		t.Fatalf("queue after set: %+v %v", q, err)
	}
	if err := in.SetQueue(ctx, "bad|name", inspect.Policy{}); !errors.Is(err, inspect.ErrInvalidArgument) {
		t.Fatalf("bad name: %v", err)
	}
	if err := in.SetQueue(ctx, "fresh", inspect.Policy{MaxRetries: hourglass.Retries(5000)}); !errors.Is(err, inspect.ErrInvalidArgument) {
		t.Fatalf("bad policy: %v", err)
	}

	if err := in.RemoveQueue(ctx, "fresh"); err != nil {
		t.Fatal(err)
	}
	err = enqueue("three")
	if !errors.Is(err, client.ErrUnknownQueue) || !strings.Contains(err.Error(), "removed") {
		t.Fatalf("enqueue to a removed queue: %v", err)
	}
	if q, _ := in.Queue(ctx, "fresh"); q.State != inspect.QueueRemoved || q.Counts.Scheduled != 2 {
		t.Fatalf("removed queue: %+v", q)
	}
	recoverAll(t, e) // tasks left: the registration stays
	if q, _ := in.Queue(ctx, "fresh"); q.State != inspect.QueueRemoved {
		t.Fatalf("removed queue with tasks: %+v", q)
	}
	for _, id := range []string{"one", "two"} { // drained (here: cancelled)
		if _, err := in.Cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	recoverAll(t, e)
	if _, err := in.Queue(ctx, "fresh"); !errors.Is(err, inspect.ErrNotFound) {
		t.Fatalf("drained removed queue still listed: %v", err)
	}
	if err := in.RemoveQueue(ctx, "fresh"); !errors.Is(err, inspect.ErrNotFound) {
		t.Fatalf("removing it again: %v", err)
	}
	if err := in.Pause(ctx, "fresh"); !errors.Is(err, inspect.ErrNotFound) {
		t.Fatalf("pausing a queue that does not exist: %v", err)
	}
}

// TestSetQueueZeroFieldsAreDefaults: SetQueue takes a zero field, and a
// nil MaxRetries, for its default, each on its own (a backoff given in
// part keeps the defaults of the rest), while MaxRetries 0 means no
// retry; the policy read back has every field set.
func TestSetQueueZeroFieldsAreDefaults(t *testing.T) {
	t.Parallel()
	_, in := newInspector(t, 2)
	ctx := testenv.Ctx(t, 30*time.Second)
	d := inspect.DefaultPolicy()
	for _, c := range []struct {
		name string
		set  inspect.Policy
		want func(p inspect.Policy) bool
	}{
		{"zero", inspect.Policy{}, func(p inspect.Policy) bool {
			retries := *p.MaxRetries
			p.MaxRetries = d.MaxRetries // the rest compared by value
			return retries == *d.MaxRetries && p == d
		}},
		{"never-retry", inspect.Policy{MaxRetries: hourglass.Retries(0)}, func(p inspect.Policy) bool {
			return *p.MaxRetries == 0 && p.Timeout == d.Timeout && p.MaxPayload == d.MaxPayload
		}},
		{"some-backoff", inspect.Policy{BackoffBase: 2 * time.Second}, func(p inspect.Policy) bool {
			return *p.MaxRetries == *d.MaxRetries && p.BackoffBase == 2*time.Second && p.BackoffCap == d.BackoffCap && p.BackoffFactor == d.BackoffFactor
		}},
	} {
		if err := in.SetQueue(ctx, c.name, c.set); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		q, err := in.Queue(ctx, c.name)
		if err != nil || q.Policy.MaxRetries == nil || !c.want(q.Policy) {
			t.Errorf("%s: policy %+v (max retries %v), %v", c.name, q.Policy, q.Policy.MaxRetries, err)
		}
	}
}
