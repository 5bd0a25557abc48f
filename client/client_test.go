package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// emailsRedis starts a Redis whose namespace "hourglass" has 16 shards
// and the queue "emails" registered with policy p, and returns a client
// of it and the layout.
func emailsRedis(t *testing.T, p shard.QueuePolicy) (*redis.Client, shard.Layout) {
	t.Helper()
	rdb := testenv.StartRedis(t).Client(t)
	l, _ := shard.NewLayout("hourglass", 16)
	if err := shard.NewStore(rdb, l).RegisterQueues(context.Background(), map[string]shard.QueuePolicy{"emails": p}); err != nil {
		t.Fatal(err)
	}
	return rdb, l
}

func newClient(t *testing.T, maxPayload int64) *client.Client {
	t.Helper()
	rdb, _ := emailsRedis(t, shard.QueuePolicy{MaxRetries: 25, Timeout: 30 * time.Second, MaxPayload: 1 << 20})
	c, err := client.New(rdb, client.Config{MaxPayload: maxPayload})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestEnqueueLookupCancel(t *testing.T) {
	t.Parallel()
	c := newClient(t, 0)
	ctx := testenv.Ctx(t, 30*time.Second)
	at := time.Now().Add(10 * time.Minute).Truncate(time.Millisecond)
	res, err := c.Enqueue(ctx, client.Task{ID: "order-42", Queue: "emails", Payload: []byte(`{"order":42}`), At: at, MaxRetries: client.Retries(0), Timeout: 2 * time.Second})
	if err != nil || res.ID != "order-42" || !res.Due.Equal(at) {
		t.Fatalf("enqueue: %+v %v", res, err)
	}
	again, err := c.Enqueue(ctx, client.Task{ID: "order-42", Queue: "emails", Payload: []byte("other")})
	if !errors.Is(err, client.ErrDuplicate) || !again.Due.Equal(at) {
		t.Fatalf("duplicate: %+v %v", again, err)
	}
	if ok, err := c.Exists(ctx, "order-42"); !ok || err != nil {
		t.Fatalf("exists: %v %v", ok, err)
	}
	info, err := c.Lookup(ctx, "order-42")
	if err != nil {
		t.Fatal(err)
	}
	if info.State != client.StateScheduled || string(info.Payload) != `{"order":42}` || info.MaxRetries != 0 || info.Timeout != 2*time.Second || !info.Due.Equal(at) || info.Queue != "emails" {
		t.Fatalf("lookup: %+v", info)
	}
	if st, err := c.Cancel(ctx, "order-42"); err != nil || st != client.StateScheduled {
		t.Fatalf("cancel: %q, %v; want it cancelled from scheduled", st, err)
	}
	if _, err := c.Lookup(ctx, "order-42"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("lookup after cancel: %v", err)
	}
	if ok, err := c.Exists(ctx, "order-42"); ok || err != nil {
		t.Fatalf("exists after cancel: %v %v", ok, err)
	}
	if _, err := c.Exists(ctx, "bad|id"); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("exists of an invalid id: %v", err)
	}
	if _, err := c.Cancel(ctx, "order-42"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("second cancel: %v", err)
	}
}

// TestCancelAndLookupFindATaskMovedSinceTheLayoutWasRead: a client that
// read the layout before a change of the shard count began (it re-reads
// it only every so often) finds a task the change has moved since: Lookup
// finds it, Cancel cancels it. Enqueues meet the shards' redirect; Cancel
// and Lookup do not, and once looked in the task's old shard only: Cancel
// said ErrNotFound, and the task ran.
func TestCancelAndLookupFindATaskMovedSinceTheLayoutWasRead(t *testing.T) {
	t.Parallel()
	rdb, l := emailsRedis(t, shard.QueuePolicy{MaxRetries: 1, Timeout: time.Second, MaxPayload: 1024})
	ctx := testenv.Ctx(t, 30*time.Second)
	st := shard.NewStore(rdb, l)
	// Two clients that read the layout before the change, one to look
	// up, one to cancel: neither learns of the change from the other's
	// calls.
	looker, err := client.New(rdb, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	canceller, err := client.New(rdb, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	const old = 1
	id := testenv.MovingIDs(16, 32, old, "order-", 1)[0]
	if _, err := canceller.Enqueue(ctx, client.Task{ID: id, Queue: "emails", Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := looker.Lookup(ctx, id); err != nil {
		t.Fatal(err)
	}
	nl, err := st.BeginResize(ctx, 32)
	if err != nil {
		t.Fatal(err)
	}
	res, err := st.Export(ctx, nl, old, 1, time.Second, []string{id})
	if err != nil || len(res.Tasks) != 1 {
		t.Fatalf("export %+v %v", res, err)
	}
	if _, err := st.Import(ctx, nl, nl.ShardOf(id), res.Tasks); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Commit(ctx, old, 1, []string{id}); err != nil {
		t.Fatal(err)
	}
	if info, err := looker.Lookup(ctx, id); err != nil || info.State != client.StateScheduled {
		t.Fatalf("Lookup(%s), moved to shard %d: %+v, %v", id, nl.ShardOf(id), info, err)
	}
	if _, err := canceller.Cancel(ctx, id); err != nil {
		info, lerr := st.Lookup(ctx, id)
		t.Fatalf("Cancel(%s) = %v, but the task is %s in shard %d (%v)", id, err, info.State, nl.ShardOf(id), lerr)
	}
	if info, err := st.Lookup(ctx, id); !errors.Is(err, shard.ErrNotFound) {
		t.Fatalf("after the cancel the task is %+v, %v", info, err)
	}
}

func TestGeneratedIDAndDelay(t *testing.T) {
	t.Parallel()
	c := newClient(t, 0)
	ctx := testenv.Ctx(t, 30*time.Second)
	before := time.Now()
	res, err := c.Enqueue(ctx, client.Task{Queue: "emails", Delay: 30 * time.Second})
	if err != nil || len(res.ID) != 16 {
		t.Fatalf("enqueue: %+v %v", res, err)
	}
	if d := res.Due.Sub(before); d < 29*time.Second || d > 31*time.Second {
		t.Fatalf("due %s after start, want about 30s", d)
	}
}

// TestTaskKey: a task's key becomes its id's hash tag, given id or
// generated, and the task is found by that id.
func TestTaskKey(t *testing.T) {
	t.Parallel()
	c := newClient(t, 0)
	ctx := testenv.Ctx(t, 30*time.Second)
	res, err := c.Enqueue(ctx, client.Task{Queue: "emails", Key: "tenant-42", ID: "order-17", Delay: time.Hour})
	if err != nil || res.ID != "{tenant-42}order-17" {
		t.Fatalf("enqueue with a key and an id: %+v %v", res, err)
	}
	if info, err := c.Lookup(ctx, res.ID); err != nil || info.ID != res.ID {
		t.Fatalf("lookup: %+v %v", info, err)
	}
	gen, err := c.Enqueue(ctx, client.Task{Queue: "emails", Key: "tenant-42", Delay: time.Hour})
	if err != nil || !strings.HasPrefix(gen.ID, "{tenant-42}") || len(gen.ID) != len("{tenant-42}")+16 {
		t.Fatalf("enqueue with a key and a generated id: %+v %v", gen, err)
	}
	if _, err := c.Enqueue(ctx, client.Task{Queue: "emails", Key: "tenant-42", ID: "order-17", Delay: time.Hour}); !errors.Is(err, client.ErrDuplicate) {
		t.Fatalf("the same key and id again: %v, want ErrDuplicate", err)
	}
	if _, err := c.Debounce(ctx, client.Debounce{Key: "k", Delay: time.Second}, client.Task{Queue: "emails", Key: "tenant-42"}); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("a debounced task with a key: %v", err)
	}
}

func TestInvalidArguments(t *testing.T) {
	t.Parallel()
	c := newClient(t, 100)
	ctx := testenv.Ctx(t, 30*time.Second)
	cases := []struct {
		name string
		task client.Task
		want error
	}{
		{"no queue", client.Task{}, client.ErrInvalidArgument},
		{"bad queue name", client.Task{Queue: "a b"}, client.ErrInvalidArgument},
		{"unknown queue", client.Task{Queue: "nope"}, client.ErrUnknownQueue},
		{"id with bar", client.Task{ID: "a|b", Queue: "emails"}, client.ErrInvalidArgument},
		{"id too long", client.Task{ID: strings.Repeat("x", 257), Queue: "emails"}, client.ErrInvalidArgument},
		{"payload over client limit", client.Task{Queue: "emails", Payload: make([]byte, 101)}, client.ErrPayloadTooLarge},
		{"negative delay", client.Task{Queue: "emails", Delay: -time.Second}, client.ErrInvalidArgument},
		{"time before 1970", client.Task{Queue: "emails", At: time.Unix(-5, 0)}, client.ErrInvalidArgument},
		{"negative retries", client.Task{Queue: "emails", MaxRetries: client.Retries(-1)}, client.ErrInvalidArgument},
		{"too many retries", client.Task{Queue: "emails", MaxRetries: client.Retries(1001)}, client.ErrInvalidArgument},
		{"sub-ms timeout", client.Task{Queue: "emails", Timeout: time.Microsecond}, client.ErrInvalidArgument},
		{"key with a brace", client.Task{Queue: "emails", Key: "a}b"}, client.ErrInvalidArgument},
		{"key too long", client.Task{Queue: "emails", Key: strings.Repeat("k", 129)}, client.ErrInvalidArgument},
		{"key and id too long together", client.Task{Queue: "emails", Key: "tenant", ID: strings.Repeat("x", 250)}, client.ErrInvalidArgument},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Enqueue(ctx, tc.task)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := c.Cancel(ctx, ""); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("cancel empty id: %v", err)
	}
	if _, err := client.New(nil, client.Config{}); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("nil redis: %v", err)
	}
}

func TestServerEnforcesQueuePayloadLimit(t *testing.T) {
	t.Parallel()
	r := testenv.StartRedis(t)
	rdb := r.Client(t)
	l, _ := shard.NewLayout("hourglass", 16)
	if err := shard.NewStore(rdb, l).RegisterQueues(context.Background(), map[string]shard.QueuePolicy{"small": {MaxPayload: 10, Timeout: time.Second}}); err != nil {
		t.Fatal(err)
	}
	c, _ := client.New(rdb, client.Config{})
	_, err := c.Enqueue(testenv.Ctx(t, 10*time.Second), client.Task{Queue: "small", Payload: make([]byte, 11)})
	if !errors.Is(err, client.ErrPayloadTooLarge) {
		t.Fatalf("got %v", err)
	}
}

func TestEnqueueBatchMixed(t *testing.T) {
	t.Parallel()
	c := newClient(t, 0)
	ctx := testenv.Ctx(t, 30*time.Second)
	var tasks []client.Task
	for i := 0; i < 500; i++ {
		tasks = append(tasks, client.Task{ID: fmt.Sprintf("b-%d", i), Queue: "emails", Delay: time.Hour})
	}
	tasks = append(tasks, client.Task{ID: "b-1", Queue: "emails"}, client.Task{Queue: "bad name"})
	res, err := c.EnqueueBatch(ctx, tasks)
	var be *client.BatchError
	if !errors.As(err, &be) || be.Failed != 2 || be.Total != 502 {
		t.Fatalf("batch error: %v", err)
	}
	for i := 0; i < 500; i++ {
		if res[i].Err != nil || res[i].Due.IsZero() {
			t.Fatalf("item %d: %+v", i, res[i])
		}
	}
	if !errors.Is(res[500].Err, client.ErrDuplicate) || !errors.Is(res[501].Err, client.ErrInvalidArgument) {
		t.Fatalf("failures: %v / %v", res[500].Err, res[501].Err)
	}
	for _, id := range []string{"b-0", "b-499"} {
		if info, err := c.Lookup(ctx, id); err != nil || info.State != client.StateScheduled {
			t.Fatalf("lookup %s: %+v %v", id, info, err)
		}
	}
}

// A producer configured with more shards than the schedulers gets an
// unknown-queue error that says so, not only "unknown queue"; a queue no
// scheduler registered is named with the namespace to check.
func TestUnknownQueueExplained(t *testing.T) {
	t.Parallel()
	r := testenv.StartRedis(t)
	rdb := r.Client(t)
	l, _ := shard.NewLayout("hourglass", 4) // the schedulers run 4 shards
	if err := shard.NewStore(rdb, l).RegisterQueues(context.Background(), map[string]shard.QueuePolicy{
		"emails": {MaxRetries: 25, Timeout: 30 * time.Second, MaxPayload: 1 << 20},
	}); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(rdb, client.Config{Shards: 16})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Ctx(t, 30*time.Second)
	var wrongShards error
	// Some id lands in shards 4..15: generated ids come in runs of
	// shard.RunLength, a shard at a time.
	for i := 0; wrongShards == nil && i < 16*shard.RunLength; i++ {
		_, wrongShards = c.Enqueue(ctx, client.Task{Queue: "emails"})
	}
	if !errors.Is(wrongShards, client.ErrUnknownQueue) || !strings.Contains(wrongShards.Error(), "registered in 4 of this process's 16 shards") {
		t.Errorf("enqueue with too many shards: %v", wrongShards)
	}
	_, err = c.Enqueue(ctx, client.Task{Queue: "nobody"})
	if !errors.Is(err, client.ErrUnknownQueue) || !strings.Contains(err.Error(), `not registered by any scheduler in namespace "hourglass"`) {
		t.Errorf("enqueue to an unregistered queue: %v", err)
	}
}

// TestGeneratedIDsGoInRuns: ids the client generates come shard.RunLength
// in a row in one shard, then as many in the next: a batch of one run's
// tasks is one script call in one shard, where ids spread by hash would
// be a call in each of the 16 shards.
func TestGeneratedIDsGoInRuns(t *testing.T) {
	t.Parallel()
	rdb, l := emailsRedis(t, shard.QueuePolicy{MaxRetries: 1, Timeout: time.Second, MaxPayload: 1024})
	ctx := testenv.Ctx(t, 30*time.Second)
	c, err := client.New(rdb, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	scriptCalls := func() int64 {
		calls := testenv.CommandCalls(t, rdb)
		return calls["evalsha"] + calls["eval"]
	}
	batch := func() []client.Result {
		tasks := make([]client.Task, shard.RunLength)
		for i := range tasks {
			tasks[i] = client.Task{Queue: "emails", Delay: time.Hour}
		}
		before := scriptCalls()
		res, err := c.EnqueueBatch(ctx, tasks)
		if err != nil {
			t.Fatal(err)
		}
		// A cold script cache adds the EVAL that loads it.
		if n := scriptCalls() - before; n < 1 || n > 2 {
			t.Fatalf("a batch of one run's tasks took %d script calls, want 1", n)
		}
		return res
	}
	first, second := batch(), batch()
	sh := l.ShardOf(first[0].ID)
	for i, res := range [][]client.Result{first, second} {
		want := (sh + i) % 16
		for _, r := range res {
			if got := l.ShardOf(r.ID); got != want {
				t.Fatalf("run %d: id %q in shard %d, want %d", i, r.ID, got, want)
			}
		}
		if n := rdb.ZCard(ctx, l.Delayed(want)).Val(); n != shard.RunLength {
			t.Fatalf("shard %d holds %d tasks, want %d", want, n, shard.RunLength)
		}
	}
}

// TestRunsSkipDebounceAndRefusedTasks: a Throttle (Debounce) call and a task the
// client refuses take no generated id, so the ids around them stay in one
// run (one shard); before, each took one from the run.
func TestRunsSkipDebounceAndRefusedTasks(t *testing.T) {
	t.Parallel()
	c := newClient(t, 0)
	ctx := testenv.Ctx(t, 30*time.Second)
	l, _ := shard.NewLayout("hourglass", 16)
	var ids []string
	for i := 0; i < shard.RunLength; i++ {
		if i%8 == 4 {
			if _, err := c.Throttle(ctx, fmt.Sprint("key-", i), time.Minute, client.Task{Queue: "emails"}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Enqueue(ctx, client.Task{Queue: "bad queue name"}); !errors.Is(err, client.ErrInvalidArgument) {
				t.Fatalf("a bad queue name: %v", err)
			}
		}
		res, err := c.Enqueue(ctx, client.Task{Queue: "emails", Delay: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.ID)
	}
	for _, id := range ids {
		if l.ShardOf(id) != l.ShardOf(ids[0]) {
			t.Fatalf("ids %q and %q of one run in shards %d and %d", ids[0], id, l.ShardOf(ids[0]), l.ShardOf(id))
		}
	}
}
