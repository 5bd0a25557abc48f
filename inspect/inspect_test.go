package inspect_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newInspector returns an env of n shards with queues a and b, and an
// Inspector on it.
func newInspector(t *testing.T, n int) (*shardtest.Env, *inspect.Inspector) {
	t.Helper()
	e := shardtest.New(t, shardtest.Options{Namespace: "insp", Shards: n,
		Queues: map[string]shard.QueuePolicy{"a": shardtest.Policy(), "b": shardtest.Policy()}})
	in, err := inspect.New(e.RDB, inspect.Config{Namespace: "insp", Shards: n})
	if err != nil {
		t.Fatal(err)
	}
	return e, in
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

// listAll pages through a listing and returns how often each id was
// listed, and the number of calls.
func listAll(t *testing.T, in *inspect.Inspector, opts inspect.ListOptions) (map[string]int, int) {
	t.Helper()
	seen := map[string]int{}
	calls := 0
	for {
		p, err := in.ListTasks(testenv.Ctx(t, 10*time.Second), opts)
		if err != nil {
			t.Fatal(err)
		}
		calls++
		if len(p.Tasks) > max(opts.Limit, inspect.DefaultLimit) {
			t.Fatalf("a page of %d tasks, limit %d", len(p.Tasks), opts.Limit)
		}
		for _, tk := range p.Tasks {
			seen[tk.ID]++
			if tk.State != opts.State || (opts.Queue != "" && tk.Queue != opts.Queue) {
				t.Fatalf("listed %+v for %+v", tk, opts)
			}
		}
		if p.Cursor == "" {
			return seen, calls
		}
		if calls > 10000 {
			t.Fatal("the listing does not end")
		}
		opts.Cursor = p.Cursor
	}
}

func checkOnce(t *testing.T, what string, seen map[string]int, want []string) {
	t.Helper()
	if len(seen) != len(want) {
		t.Errorf("%s: %d distinct ids listed, want %d", what, len(seen), len(want))
	}
	for _, id := range want {
		if seen[id] != 1 {
			t.Fatalf("%s: %s listed %d times", what, id, seen[id])
		}
	}
}

// TestPagingListsEachTaskOnce: 10,000 scheduled tasks over 16 shards,
// half of them in the far tier, listed by pages of 100: each exactly
// once, in bounded calls; the queue filter and the other states too.
func TestPagingListsEachTaskOnce(t *testing.T) {
	t.Parallel()
	e, in := newInspector(t, 16)
	ctx := testenv.Ctx(t, time.Minute)
	if err := e.Store.SetFarTier(ctx, shard.FarTier{Bucket: time.Minute, Lead: 15 * time.Second}); err != nil {
		t.Fatal(err)
	}
	near, far := ids("near-", 5000), ids("far-", 5000)
	for i := 0; i < 5000; i += 1000 {
		e.Schedule("a", time.Hour, near[i:i+500]...)
		e.Schedule("b", time.Hour, near[i+500:i+1000]...)
	}
	// The far tier: several buckets, some larger than a page.
	for i := 0; i < 5000; i += 500 {
		e.Schedule("a", time.Duration(2+i/500)*time.Hour, far[i:i+500]...)
	}
	if n, err := e.RDB.ZCard(ctx, e.Layout().Far(0)).Result(); err != nil || n == 0 {
		t.Fatalf("no far-tier buckets in shard 0 (%d, %v): the test would not cover the tier", n, err)
	}
	seen, calls := listAll(t, in, inspect.ListOptions{State: inspect.StateScheduled, Limit: 100})
	checkOnce(t, "scheduled", seen, append(append([]string{}, near...), far...))
	t.Logf("10,000 scheduled tasks over 16 shards listed in %d calls of at most 100", calls)
	if calls < 100 || calls > 100+2*16 {
		t.Errorf("%d calls for 10,000 tasks by 100", calls)
	}

	var wantA []string
	for i := 0; i < 5000; i += 1000 {
		wantA = append(wantA, near[i:i+500]...)
	}
	wantA = append(wantA, far...)
	seenA, _ := listAll(t, in, inspect.ListOptions{State: inspect.StateScheduled, Queue: "a", Limit: 250})
	checkOnce(t, "queue a", seenA, wantA)

	ready := ids("ready-", 300)
	e.Ready("b", ready...)
	seenR, _ := listAll(t, in, inspect.ListOptions{State: inspect.StateReady, Queue: "b", Limit: 7})
	checkOnce(t, "ready", seenR, ready)

	dead := e.Dead("a", "dead-", 40)
	seenD, _ := listAll(t, in, inspect.ListOptions{State: inspect.StateDead, Limit: 3})
	checkOnce(t, "dead", seenD, dead)
}

// TestReadyPagingAfterPops: workers popping between two pages shift the
// list; the next page still starts after the last entry listed.
func TestReadyPagingAfterPops(t *testing.T) {
	t.Parallel()
	e, in := newInspector(t, 1)
	ctx := testenv.Ctx(t, 30*time.Second)
	all := ids("r-", 50)
	e.Ready("a", all...)
	p, err := in.ListTasks(ctx, inspect.ListOptions{State: inspect.StateReady, Queue: "a", Limit: 20})
	if err != nil || len(p.Tasks) != 20 {
		t.Fatalf("first page: %d tasks, %v", len(p.Tasks), err)
	}
	// A worker pops 10 from the head.
	if _, entries, err := e.Store.Pop(ctx, e.Layout().ReadyKeys([]string{"a"}), 10, time.Second); err != nil || len(entries) != 10 {
		t.Fatalf("pop: %d %v", len(entries), err)
	}
	p2, err := in.ListTasks(ctx, inspect.ListOptions{State: inspect.StateReady, Queue: "a", Limit: 100, Cursor: p.Cursor})
	if err != nil {
		t.Fatal(err)
	}
	// The pops took entries of the first page: the second page is the
	// other 30, each once.
	seen := map[string]int{}
	for _, tk := range append(p.Tasks, p2.Tasks...) {
		seen[tk.ID]++
	}
	if len(p2.Tasks) != 30 || p2.Cursor != "" {
		t.Fatalf("second page after pops: %d tasks, cursor %q; want the last 30", len(p2.Tasks), p2.Cursor)
	}
	checkOnce(t, "ready across pops", seen, all)
}

// TestCursorIsChecked: a cursor of another listing or garbage is an
// invalid argument, not a crash or a wrong page.
func TestCursorIsChecked(t *testing.T) {
	t.Parallel()
	e, in := newInspector(t, 2)
	ctx := testenv.Ctx(t, 30*time.Second)
	e.Schedule("a", time.Hour, ids("c-", 10)...)
	p, err := in.ListTasks(ctx, inspect.ListOptions{State: inspect.StateScheduled, Limit: 3})
	if err != nil || p.Cursor == "" {
		t.Fatalf("%v %q", err, p.Cursor)
	}
	for _, o := range []inspect.ListOptions{
		{State: inspect.StateDead, Cursor: p.Cursor},
		{State: inspect.StateScheduled, Cursor: "not a cursor"},
		{State: inspect.StateReady},
		{State: "sleeping"},
	} {
		if _, err := in.ListTasks(ctx, o); !errors.Is(err, inspect.ErrInvalidArgument) {
			t.Errorf("%+v: %v, want ErrInvalidArgument", o, err)
		}
	}
}

// trueCounts counts queue q's tasks by reading every key of every shard
// (what the counters must agree with).
func trueCounts(t *testing.T, e *shardtest.Env, q string) inspect.Counts {
	t.Helper()
	ctx := testenv.Ctx(t, 30*time.Second)
	l := e.Layout()
	var c inspect.Counts
	queueOf := func(sh int, id string) string {
		blob, _ := e.RDB.HGet(ctx, l.Tasks(sh), id).Result()
		d, err := e.Store.DecodeIn(sh, id, []byte(blob))
		if err != nil {
			return ""
		}
		return d.Queue
	}
	for sh := range l.Shards() {
		tasks, _ := e.RDB.HKeys(ctx, l.Tasks(sh)).Result()
		inSet := map[string]bool{}
		for key, n := range map[string]*int64{l.Delayed(sh): &c.Scheduled, l.Inflight(sh): &c.InFlight, l.Dead(sh): &c.Dead} {
			members, _ := e.RDB.ZRange(ctx, key, 0, -1).Result()
			for _, id := range members {
				inSet[id] = true
				if queueOf(sh, id) == q {
					*n++
				}
			}
		}
		pending, _ := e.RDB.ZRange(ctx, l.Pending(sh, q), 0, -1).Result()
		ready, _ := e.RDB.LLen(ctx, l.Ready(sh, q)).Result()
		c.Ready += ready
		c.InFlight += int64(len(pending)) - ready
		for _, id := range pending {
			inSet[id] = true
		}
		for _, id := range tasks { // in no set: the far tier
			if !inSet[id] && queueOf(sh, id) == q {
				c.Scheduled++
			}
		}
	}
	return c
}

// TestDepthEqualsTrueCounts: after a known workload touching every state
// change (enqueue near and far, move, pop, lease, ack, nack with retry,
// bury, cancel, recovery of an expired lease, replay, purge) the counts
// equal the truth read from the keys, queue by queue and shard by shard.
func TestDepthEqualsTrueCounts(t *testing.T) {
	t.Parallel()
	e, in := newInspector(t, 4)
	ctx := testenv.Ctx(t, 30*time.Second)
	if err := e.Store.SetFarTier(ctx, shard.FarTier{Bucket: time.Minute, Lead: 15 * time.Second}); err != nil {
		t.Fatal(err)
	}
	e.Schedule("a", time.Hour, ids("near-", 30)...)
	e.Schedule("a", 5*time.Hour, ids("far-", 20)...)
	e.Ready("b", ids("ready-", 12)...)
	// Popped: 6 of queue a; 2 acked unleased, 2 leased (1 acked, 1
	// released), 1 nacked (retry), 1 left popped.
	pops := e.Popped("a", "pop-", 6)
	if errs := e.Store.AckBatch(ctx, []shard.AckArgs{pops[0].AckArgs(true), pops[1].AckArgs(true)}); errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	leased := make([]shard.Delivery, 0, 2)
	for _, d := range pops[2:4] {
		ds, err := e.Store.Claim(ctx, d.Shard, "a", []string{shard.EntryRef(fmt.Sprintf("%s|%s", d.Token, d.Task.ID))}, time.Minute)
		if err != nil || len(ds) != 1 {
			t.Fatalf("claim: %v %v", ds, err)
		}
		leased = append(leased, ds[0])
	}
	if errs := e.Store.AckBatch(ctx, []shard.AckArgs{leased[0].AckArgs(false)}); errs[0] != nil {
		t.Fatal(errs)
	}
	if err := e.Store.Release(ctx, leased[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Store.Nack(ctx, pops[4].NackArgs(true, "boom")); err != nil {
		t.Fatal(err)
	}
	dead := e.Dead("b", "dead-", 9)
	if _, err := e.Store.Cancel(ctx, "near-0"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Store.Cancel(ctx, "far-0"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Store.Cancel(ctx, dead[0]); err != nil {
		t.Fatal(err)
	}
	if err := in.Replay(ctx, dead[1], time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := in.Purge(ctx, dead[2]); err != nil {
		t.Fatal(err)
	}
	// A garbage member buried by the mover counts as dead under no queue.
	if err := e.RDB.ZAdd(ctx, e.Layout().Delayed(0), redis.Z{Score: 1, Member: "garbage"}).Err(); err != nil {
		t.Fatal(err)
	}
	e.MoveAhead(0)

	qs, total, err := in.Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var sum inspect.Counts
	for _, q := range qs {
		if q.Name == "" {
			if q.Counts != (inspect.Counts{Dead: 1}) {
				t.Errorf("queue \"\": %+v, want the buried garbage member only", q.Counts)
			}
		} else if want := trueCounts(t, e, q.Name); q.Counts != want {
			t.Errorf("queue %s: counts %+v, true %+v", q.Name, q.Counts, want)
		}
		sum.Scheduled += q.Counts.Scheduled
		sum.Ready += q.Counts.Ready
		sum.InFlight += q.Counts.InFlight
		sum.Dead += q.Counts.Dead
	}
	if sum != total {
		t.Errorf("total %+v, sum of queues %+v", total, sum)
	}
	a, err := in.Queue(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	// a: 29 near + 19 far + 1 retried scheduled + 1 released ready, 1
	// popped in flight.
	if want := (inspect.Counts{Scheduled: 49, Ready: 1, InFlight: 1}); a.Counts != want {
		t.Errorf("queue a: %+v, want %+v", a.Counts, want)
	}
	var perShard inspect.Counts
	for _, c := range a.Shards {
		perShard.Scheduled += c.Scheduled
		perShard.Ready += c.Ready
		perShard.InFlight += c.InFlight
		perShard.Dead += c.Dead
	}
	if perShard != a.Counts || len(a.Shards) != 4 {
		t.Errorf("queue a per shard %+v sums to %+v, want %+v", a.Shards, perShard, a.Counts)
	}
}
