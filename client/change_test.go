package client_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

func TestRescheduleAndReplace(t *testing.T) {
	t.Parallel()
	c := newClient(t, 0)
	ctx := testenv.Ctx(t, 30*time.Second)
	at := time.Now().Add(10 * time.Minute).Truncate(time.Millisecond)
	if _, err := c.Enqueue(ctx, client.Task{ID: "order-7", Queue: "emails", Payload: []byte("v1"), At: at, MaxRetries: client.Retries(2)}); err != nil {
		t.Fatal(err)
	}
	sooner := at.Add(-5 * time.Minute)
	if due, err := c.Reschedule(ctx, "order-7", sooner); err != nil || !due.Equal(sooner) {
		t.Fatalf("reschedule: %v, %v; want %v", due, err, sooner)
	}
	if err := c.Replace(ctx, "order-7", []byte("v2")); err != nil {
		t.Fatalf("replace: %v", err)
	}
	info, err := c.Lookup(ctx, "order-7")
	if err != nil || !info.Due.Equal(sooner) || string(info.Payload) != "v2" || info.MaxRetries != 2 || info.State != client.StateScheduled {
		t.Fatalf("lookup after the changes: %+v, %v", info, err)
	}
	if _, err := c.Reschedule(ctx, "nobody", sooner); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("reschedule of an unknown id: %v, want ErrNotFound", err)
	}
	if _, err := c.Reschedule(ctx, "order-7", time.Time{}); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("reschedule to the zero time: %v, want ErrInvalidArgument", err)
	}
	if err := c.Replace(ctx, "bad|id", nil); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("replace of an invalid id: %v, want ErrInvalidArgument", err)
	}
}

func TestEnqueueConflictRules(t *testing.T) {
	t.Parallel()
	c := newClient(t, 0)
	ctx := testenv.Ctx(t, 30*time.Second)
	base := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	enqueue := func(rule client.Conflict, at time.Time, payload string) client.Result {
		t.Helper()
		r, _ := c.Enqueue(ctx, client.Task{ID: "debounced", Queue: "emails", Payload: []byte(payload), At: at, OnConflict: rule})
		return r
	}
	if r := enqueue(client.ConflictReplace, base, "first"); r.Err != nil || r.Changed {
		t.Fatalf("first enqueue: %+v", r)
	}
	for _, tc := range []struct {
		rule    client.Conflict
		at      time.Time
		payload string
		due     time.Time
		stored  string
	}{
		{client.ConflictKeepLatest, base.Add(-time.Minute), "ignored", base, "first"},
		{client.ConflictKeepEarliest, base.Add(-time.Minute), "ignored", base.Add(-time.Minute), "first"},
		{client.ConflictKeepLatest, base.Add(time.Minute), "ignored", base.Add(time.Minute), "first"},
		{client.ConflictReplace, base, "second", base, "second"},
	} {
		r := enqueue(tc.rule, tc.at, tc.payload)
		if r.Err != nil || !r.Changed || !r.Due.Equal(tc.due) {
			t.Errorf("%s at %v: %+v; want the live task changed, due %v", tc.rule, tc.at, r, tc.due)
		}
		if info, err := c.Lookup(ctx, "debounced"); err != nil || string(info.Payload) != tc.stored || !info.Due.Equal(tc.due) {
			t.Errorf("after %s: %+v, %v; want payload %q due %v", tc.rule, info, err, tc.stored, tc.due)
		}
	}
	if r := enqueue(client.ConflictIgnore, base.Add(time.Hour), "x"); !errors.Is(r.Err, client.ErrDuplicate) || r.Changed {
		t.Errorf("ignore: %+v, want ErrDuplicate and nothing changed", r)
	}
	info, err := c.Lookup(ctx, "debounced")
	if err != nil || string(info.Payload) != "second" || !info.Due.Equal(base) {
		t.Errorf("the live task: %+v, %v; want payload second due %v", info, err, base)
	}
	// The live task is gone: the rule enqueues the task anew.
	if _, err := c.Cancel(ctx, "debounced"); err != nil {
		t.Fatal(err)
	}
	if r := enqueue(client.ConflictReplace, base, "third"); r.Err != nil || r.Changed {
		t.Errorf("enqueue with a rule and no live task: %+v", r)
	}
}

func TestDebounceAndThrottle(t *testing.T) {
	t.Parallel()
	c := newClient(t, 0)
	ctx := testenv.Ctx(t, 30*time.Second)
	d := client.Debounce{Key: "customer-1", Delay: time.Hour, MaxWait: 2 * time.Hour}
	first, err := c.Debounce(ctx, d, client.Task{Queue: "emails", Payload: []byte("v1"), Priority: client.PriorityLow})
	if err != nil || first.Outcome != client.Created || first.Turn != 1 {
		t.Fatalf("first call: %+v, %v", first, err)
	}
	second, err := c.Debounce(ctx, d, client.Task{Queue: "emails", Payload: []byte("v2")})
	if err != nil || second.Outcome != client.Changed || second.ID != first.ID || second.Turn != 2 || second.Due.Before(first.Due) {
		t.Fatalf("second call: %+v, %v; want %s changed and moved later", second, err, first.ID)
	}
	if info, err := c.Lookup(ctx, first.ID); err != nil || string(info.Payload) != "v2" || !info.Due.Equal(second.Due) || info.Priority != client.PriorityLow {
		t.Fatalf("the window's task: %+v, %v; want v2 at the first call's level, low", info, err)
	}
	if r, err := c.Throttle(ctx, "endpoint-9", time.Hour, client.Task{Queue: "emails"}); err != nil || r.Outcome != client.Created {
		t.Fatalf("throttle, first: %+v, %v", r, err)
	}
	if r, err := c.Throttle(ctx, "endpoint-9", time.Hour, client.Task{Queue: "emails"}); err != nil || r.Outcome != client.Dropped {
		t.Fatalf("throttle, second: %+v, %v; want dropped", r, err)
	}
	if _, err := c.Debounce(ctx, d, client.Task{ID: "mine", Queue: "emails"}); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("a debounced task with an id: %v, want ErrInvalidArgument", err)
	}
	if _, err := c.Debounce(ctx, client.Debounce{Key: "k", Delay: time.Second, Edge: 7}, client.Task{Queue: "emails"}); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("an unknown edge: %v, want ErrInvalidArgument", err)
	}
}

func TestUniqueForOutlivesTheTask(t *testing.T) {
	t.Parallel()
	c := newClient(t, 0)
	ctx := testenv.Ctx(t, 30*time.Second)
	task := client.Task{ID: "charge-77", Queue: "emails", Payload: []byte("x"), Delay: time.Hour, UniqueFor: time.Hour}
	if _, err := c.Enqueue(ctx, task); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, task); !errors.Is(err, client.ErrDuplicate) || !strings.Contains(err.Error(), "scheduled") {
		t.Fatalf("while live: %v, want a duplicate of the scheduled task", err)
	}
	// Finished (here: cancelled), the id stays reserved for UniqueFor.
	if _, err := c.Cancel(ctx, "charge-77"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, task); !errors.Is(err, client.ErrDuplicate) || !strings.Contains(err.Error(), "reserved") {
		t.Fatalf("after the task: %v, want a duplicate of the reservation", err)
	}
	// Without UniqueFor an enqueue does not look at reservations.
	plain := task
	plain.UniqueFor = 0
	if _, err := c.Enqueue(ctx, plain); err != nil {
		t.Fatalf("an enqueue without UniqueFor: %v", err)
	}
	// A short reservation ends.
	short := client.Task{ID: "charge-78", Queue: "emails", Delay: time.Hour, UniqueFor: 50 * time.Millisecond}
	if _, err := c.Enqueue(ctx, short); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cancel(ctx, "charge-78"); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 5*time.Second, "the reservation of charge-78 to end", func() (bool, string) {
		_, err := c.Enqueue(ctx, short)
		return err == nil, fmt.Sprint(err)
	})
	// Batches mix reserved and plain tasks, each with its own result.
	rs, _ := c.EnqueueBatch(ctx, []client.Task{task, {ID: "plain-1", Queue: "emails", Delay: time.Hour}, {ID: "u-2", Queue: "emails", Delay: time.Hour, UniqueFor: time.Minute}})
	if !errors.Is(rs[0].Err, client.ErrDuplicate) || rs[1].Err != nil || rs[2].Err != nil {
		t.Fatalf("a mixed batch: %+v", rs)
	}
	if _, err := c.Enqueue(ctx, client.Task{Queue: "emails", UniqueFor: time.Microsecond}); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("UniqueFor below 1ms: %v", err)
	}
}
