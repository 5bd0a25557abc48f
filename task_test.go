package hourglass_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass"
	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestLookupAndInspectReportOneView: client.Lookup and inspect's Task
// return the same hourglass.TaskInfo for a task in every state (and for
// one whose data does not decode), and a listing reports the same task
// the same way: a dead task's LastError is its burial error, an active
// one has its lease deadline, undecodable data is a Problem.
func TestLookupAndInspectReportOneView(t *testing.T) {
	t.Parallel()
	e, c, in := deployment(t, "view", client.Config{})
	ctx := testenv.Ctx(t, 30*time.Second)
	dead := e.Dead(shardtest.Queue, "dead-", 1)[0]
	popped := e.Popped(shardtest.Queue, "active-", 1)[0]
	if _, err := e.Store.Claim(ctx, popped.Shard, shardtest.Queue, []string{popped.Ref()}, time.Minute); err != nil {
		t.Fatal(err)
	}
	e.Ready(shardtest.Queue, "ready")
	if _, err := c.Enqueue(ctx, client.Task{ID: "scheduled", Queue: shardtest.Queue, Payload: []byte("p"), Delay: time.Hour,
		MaxRetries: hourglass.Retries(0)}); err != nil {
		t.Fatal(err)
	}
	e.Schedule(shardtest.Queue, time.Hour, "garbled")
	l := e.Layout()
	e.RDB.HSet(ctx, l.Tasks(l.ShardOf("garbled")), "garbled", "not an encoding")

	for _, c2 := range []struct {
		id      string
		state   hourglass.State
		check   func(hourglass.TaskInfo) bool
		listing bool
	}{
		{id: "scheduled", state: hourglass.StateScheduled, listing: true, check: func(ti hourglass.TaskInfo) bool {
			return ti.MaxRetries == 0 && string(ti.Payload) == "p" && ti.PayloadSize == 1 && ti.Problem == ""
		}},
		{id: "ready", state: hourglass.StateReady, listing: true, check: func(ti hourglass.TaskInfo) bool { return ti.Queue == shardtest.Queue }},
		{id: popped.Task.ID, state: hourglass.StateActive, listing: true, check: func(ti hourglass.TaskInfo) bool {
			return time.Until(ti.LeaseDeadline) > 30*time.Second
		}},
		{id: dead, state: hourglass.StateDead, listing: true, check: func(ti hourglass.TaskInfo) bool {
			return ti.Dead != nil && ti.Dead.Error == "shardtest: dead" && ti.LastError == ti.Dead.Error && !ti.Dead.At.IsZero()
		}},
		{id: "garbled", state: hourglass.StateScheduled, check: func(ti hourglass.TaskInfo) bool {
			return ti.Problem != "" && ti.PayloadSize == -1 && ti.Queue == ""
		}},
	} {
		byClient, err := c.Lookup(ctx, c2.id)
		if err != nil {
			t.Fatalf("client Lookup %s: %v", c2.id, err)
		}
		byInspect, err := in.Task(ctx, c2.id)
		if err != nil {
			t.Fatalf("inspect Task %s: %v", c2.id, err)
		}
		if !reflect.DeepEqual(byClient, byInspect) {
			t.Errorf("%s: client Lookup %+v, inspect Task %+v", c2.id, byClient, byInspect)
		}
		if byClient.State != c2.state || byClient.ID != c2.id || !c2.check(byClient) {
			t.Errorf("%s: %+v (want state %s)", c2.id, byClient, c2.state)
		}
		if !c2.listing {
			continue
		}
		page, err := in.ListTasks(ctx, inspect.ListOptions{State: c2.state, Queue: shardtest.Queue, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, listed := range page.Tasks {
			if listed.ID == c2.id {
				found = true
				if !reflect.DeepEqual(listed, byInspect) {
					t.Errorf("%s: listed %+v, looked up %+v", c2.id, listed, byInspect)
				}
			}
		}
		if !found {
			t.Errorf("%s: not listed as %s", c2.id, c2.state)
		}
	}
}

// deployment returns a fresh Redis with a deployment of two shards in
// namespace ns, and a client (cc with the namespace and shard count
// set) and an inspector on it.
func deployment(t *testing.T, ns string, cc client.Config) (*shardtest.Env, *client.Client, *inspect.Inspector) {
	t.Helper()
	e := shardtest.New(t, shardtest.Options{Namespace: ns, Shards: 2})
	cc.Namespace, cc.Shards = ns, 2
	c, err := client.New(e.RDB, cc)
	if err != nil {
		t.Fatal(err)
	}
	in, err := inspect.New(e.RDB, inspect.Config{Namespace: ns, Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	return e, c, in
}
