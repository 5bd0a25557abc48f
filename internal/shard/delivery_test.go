package shard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// readyTask enqueues a task due now in shard sh and moves it, returning
// its id.
func readyTask(t *testing.T, s *Store, sh int, prefix, queue string, retries int) string {
	t.Helper()
	ctx := context.Background()
	id := shardIDs(s.Layout(), sh, prefix, 1)[0]
	if r := s.Enqueue(ctx, EnqueueArgs{ID: id, Queue: queue, MaxRetries: retries, Payload: []byte("p-" + id)}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if _, err := s.Move(ctx, sh, 1, 1000); err != nil {
		t.Fatal(err)
	}
	return id
}

func popClaim(t *testing.T, s *Store, queues []string, lease time.Duration) Delivery {
	t.Helper()
	ctx := context.Background()
	key, ids, err := s.Pop(ctx, s.Layout().ReadyKeys(queues), 1, time.Second)
	if err != nil || len(ids) != 1 {
		t.Fatalf("pop: %v %v", ids, err)
	}
	sh, q, ok := s.Layout().ParseReady(key)
	if !ok {
		t.Fatalf("ParseReady(%q) failed", key)
	}
	ds, err := s.Claim(ctx, sh, q, ids, lease)
	if err != nil || len(ds) != 1 {
		t.Fatalf("claim: %v %v", ds, err)
	}
	return ds[0]
}

func TestPopClaimAck(t *testing.T) {
	t.Parallel()
	s, rdb := newTestStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	id := readyTask(t, s, 2, "a", "mail", -1)
	d := popClaim(t, s, []string{"default", "mail"}, 0)
	if d.Task.ID != id || d.Task.Queue != "mail" || string(d.Task.Payload) != "p-"+id || d.Shard != 2 {
		t.Fatalf("delivery %+v", d)
	}
	if lease := d.Deadline.Sub(d.Leased); lease != 5*time.Second {
		t.Fatalf("lease %s, want the task's timeout 5s", lease)
	}
	if info, _ := s.Lookup(ctx, id); info.State != "active" {
		t.Fatalf("state %q, want active", info.State)
	}
	if err := s.Ack(ctx, AckArgs{Shard: s.Layout().ShardOf(id), ID: id, Token: d.Token + "x"}); !errors.Is(err, ErrStaleToken) {
		t.Fatalf("ack with wrong token: %v", err)
	}
	if err := s.Ack(ctx, AckArgs{Shard: s.Layout().ShardOf(id), ID: id, Token: d.Token}); err != nil {
		t.Fatal(err)
	}
	if err := s.Ack(ctx, AckArgs{Shard: s.Layout().ShardOf(id), ID: id, Token: d.Token}); !errors.Is(err, ErrStaleToken) {
		t.Fatalf("second ack: %v", err)
	}
	if _, err := s.Lookup(ctx, id); !errors.Is(err, ErrNotFound) {
		t.Fatalf("acked task still there: %v", err)
	}
	for _, k := range []string{s.k.Inflight(2), s.k.Leases(2), s.k.Pending(2, "mail"), s.k.Ready(2, "mail")} {
		if n, _ := rdb.Exists(ctx, k).Result(); n != 0 {
			t.Errorf("%s left behind", k)
		}
	}
	// Idle pop times out empty.
	if key, ids, err := s.Pop(ctx, s.Layout().ReadyKeys([]string{"mail"}), 5, time.Second); err != nil || key != "" || ids != nil {
		t.Fatalf("empty pop: %q %v %v", key, ids, err)
	}
}

func TestClaimSkipsNonPendingAndBuriesGarbage(t *testing.T) {
	t.Parallel()
	s, rdb := newTestStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	readyTask(t, s, 0, "c", "default", -1)
	_, entries, err := s.Pop(ctx, s.Layout().ReadyKeys([]string{"default"}), 1, time.Second)
	if err != nil || len(entries) != 1 {
		t.Fatal(entries, err)
	}
	// The same entry twice, an id never made ready, an entry of a wrong
	// sequence number and garbage: one lease.
	ref := EntryRef(entries[0])
	id := ref[strings.Index(ref, "|")+1:]
	ds, err := s.Claim(ctx, 0, "default", []string{entries[0], entries[0], "77|never-ready", "999|" + id, "garbage"}, time.Second)
	if err != nil || len(ds) != 1 || ds[0].Task.ID != id {
		t.Fatalf("claim leased %d deliveries: %v", len(ds), err)
	}
	// A hand-written ready entry whose data is garbage is buried at claim;
	// so is data whose timeout reads but whose due time does not: claim
	// reads the whole header (lib.lua's header), not only the timeout.
	for seq, data := range []string{"zzz", "1|default|0|3|30000|soon|1|payload"} {
		junk := fmt.Sprintf("junk%d", seq)
		rdb.ZAdd(ctx, s.k.Pending(0, "default"), redis.Z{Score: float64(seq), Member: junk})
		rdb.HSet(ctx, s.k.Tasks(0), junk, data)
		if ds, err := s.Claim(ctx, 0, "default", []string{fmt.Sprintf("%d|%s", seq, junk)}, 0); err != nil || len(ds) != 0 {
			t.Fatalf("garbage %q claimed: %v %v", data, ds, err)
		}
		if info := rdb.HGet(ctx, s.k.DeadInfo(0), junk).Val(); !strings.Contains(info, "undecodable") {
			t.Fatalf("dead info of %q: %q", data, info)
		}
	}
}

func TestExtend(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	readyTask(t, s, 1, "e", "default", -1)
	d := popClaim(t, s, []string{"default"}, time.Second)
	dl, err := s.Extend(ctx, d, time.Minute)
	if err != nil || dl.Sub(d.Leased) < 59*time.Second {
		t.Fatalf("extend: %v %v", dl, err)
	}
	stale := d
	stale.Token = "bogus"
	if _, err := s.Extend(ctx, stale, time.Minute); !errors.Is(err, ErrStaleToken) {
		t.Fatalf("extend with stale token: %v", err)
	}
}

func TestNackRetriesWithBackoffThenBuries(t *testing.T) {
	t.Parallel()
	s, rdb := newTestStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	id := readyTask(t, s, 3, "n", "default", 2)
	b := Backoff{Base: 10 * time.Second, Cap: time.Minute, Factor: 3}
	for attempt := 1; attempt <= 2; attempt++ {
		d := popClaim(t, s, []string{"default"}, 0)
		res, err := s.Nack(ctx, NackArgs{Shard: s.Layout().ShardOf(id), ID: id, Token: d.Token, Err: fmt.Sprintf("boom %d", attempt), Backoff: b, Rand: 0.5})
		if err != nil || res.Dead || res.Attempts != attempt {
			t.Fatalf("nack %d: %+v %v", attempt, res, err)
		}
		want := b.Delay(attempt, 0.5)
		if got := res.Due.Sub(d.Leased); got < want || got > want+time.Second {
			t.Fatalf("attempt %d: retry after %s, want %s (Go and Lua backoff must agree)", attempt, got, want)
		}
		if _, err := s.Nack(ctx, NackArgs{Shard: s.Layout().ShardOf(id), ID: id, Token: d.Token, Err: "again"}); !errors.Is(err, ErrStaleToken) {
			t.Fatalf("second nack: %v", err)
		}
		// Make it due again by hand and move it.
		rdb.ZAdd(ctx, s.k.Delayed(3), redis.Z{Score: 1, Member: id})
		if _, err := s.Move(ctx, 3, 1, 10); err != nil {
			t.Fatal(err)
		}
	}
	d := popClaim(t, s, []string{"default"}, 0)
	res, err := s.Nack(ctx, NackArgs{Shard: s.Layout().ShardOf(id), ID: id, Token: d.Token, Err: "boom 3"})
	if err != nil || !res.Dead || res.Attempts != 3 {
		t.Fatalf("final nack: %+v %v", res, err)
	}
	info, _ := s.Lookup(ctx, id)
	if info.State != "dead" || info.Task.Attempts != 3 || !strings.Contains(info.DeadInfo, "max retries exhausted") || !strings.Contains(info.DeadInfo, "boom 3") {
		t.Fatalf("dead task: %+v", info)
	}
	if string(info.Task.Payload) != "p-"+id {
		t.Fatalf("payload not kept intact: %q", info.Task.Payload)
	}
}

func TestNackDeadAndRetryAfter(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	id := readyTask(t, s, 0, "d", "default", 5)
	d := popClaim(t, s, []string{"default"}, 0)
	res, err := s.Nack(ctx, NackArgs{Shard: s.Layout().ShardOf(id), ID: id, Token: d.Token, Err: "later", RetryAfter: 42 * time.Second})
	if err != nil || res.Dead {
		t.Fatal(res, err)
	}
	if got := res.Due.Sub(d.Leased); got < 42*time.Second || got > 43*time.Second {
		t.Fatalf("retry after %s, want 42s", got)
	}
	id2 := readyTask(t, s, 1, "x", "default", 5)
	d2 := popClaim(t, s, []string{"default"}, 0)
	res, err = s.Nack(ctx, NackArgs{Shard: s.Layout().ShardOf(id2), ID: id2, Token: d2.Token, Err: "bad input", Dead: true})
	if err != nil || !res.Dead || res.Attempts != 1 {
		t.Fatal(res, err)
	}
	info, _ := s.Lookup(ctx, id2)
	if !strings.Contains(info.DeadInfo, "not retryable") || !strings.Contains(info.DeadInfo, "bad input") {
		t.Fatalf("dead info %q", info.DeadInfo)
	}
}

func TestRelease(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	id := readyTask(t, s, 2, "r", "default", -1)
	d := popClaim(t, s, []string{"default"}, 0)
	if err := s.Release(ctx, d); err != nil {
		t.Fatal(err)
	}
	if err := s.Ack(ctx, AckArgs{Shard: s.Layout().ShardOf(id), ID: id, Token: d.Token}); !errors.Is(err, ErrStaleToken) {
		t.Fatalf("ack after release: %v", err)
	}
	d2 := popClaim(t, s, []string{"default"}, 0)
	if d2.Task.ID != id || d2.Task.Attempts != 0 {
		t.Fatalf("released task redelivered as %+v", d2)
	}
}

func TestRecoverExpiredLeases(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	retry := readyTask(t, s, 0, "x", "default", 3)
	bury := readyTask(t, s, 0, "y", "default", 0)
	var tokens = map[string]string{}
	for i := 0; i < 2; i++ {
		d := popClaim(t, s, []string{"default"}, time.Millisecond)
		tokens[d.Task.ID] = d.Token
	}
	var retried, buried int
	byQueue := map[string][2]int{}
	testenv.WaitFor(t, 5*time.Second, "leases expired and recovered", func() (bool, string) {
		r, err := s.Recover(ctx, 0, 1, RecoverArgs{Limit: 10})
		retried, buried = retried+r.Retried, buried+r.Buried
		for _, f := range r.Failed {
			c := byQueue[f.Queue]
			byQueue[f.Queue] = [2]int{c[0] + f.Retried, c[1] + f.Buried}
		}
		return err == nil && retried == 1 && buried == 1, fmt.Sprintf("%+v %v", r, err)
	})
	if len(byQueue) != 1 || byQueue["default"] != [2]int{1, 1} {
		t.Fatalf("failed attempts per queue %v, want default: 1 retried, 1 buried", byQueue)
	}
	info, _ := s.Lookup(ctx, retry)
	if info.State != "scheduled" || info.Task.Attempts != 1 {
		t.Fatalf("expired lease not rescheduled: %+v", info)
	}
	if d := info.At.Sub(time.Now()); d < 0 || d > 2*time.Second {
		t.Fatalf("retry due in %s, want the default backoff of 0.5-1s", d)
	}
	info, _ = s.Lookup(ctx, bury)
	if info.State != "dead" || !strings.Contains(info.DeadInfo, "lease expired") {
		t.Fatalf("expired lease with no retries left: %+v", info)
	}
	if err := s.Ack(ctx, AckArgs{Shard: s.Layout().ShardOf(retry), ID: retry, Token: tokens[retry]}); !errors.Is(err, ErrStaleToken) {
		t.Fatalf("late ack after expiry: %v", err)
	}
	if _, err := s.Recover(ctx, 0, 0, RecoverArgs{Limit: 10}); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("stale recover: %v", err)
	}
}

func TestRecoverStrandedPops(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	lost := readyTask(t, s, 1, "lost", "mail", -1)
	kept := readyTask(t, s, 1, "kept", "mail", -1)
	keys := s.Layout().ReadyKeys([]string{"mail"})
	// A worker pops both and dies before leasing the first; the second is
	// popped by a worker that leases it between two recovery passes.
	_, ids, err := s.Pop(ctx, keys, 2, time.Second)
	if err != nil || len(ids) != 2 || !strings.Contains(ids[0], "|"+lost+"|") {
		t.Fatalf("pop: %v %v", ids, err)
	}
	r1, err := s.Recover(ctx, 1, 1, RecoverArgs{Limit: 10})
	if err != nil || len(r1.Candidates) != 2 || r1.Redelivered != 0 || r1.Pending != 2 {
		t.Fatalf("first pass: %+v %v", r1, err)
	}
	if ds, err := s.Claim(ctx, 1, "mail", ids[1:], 0); err != nil || len(ds) != 1 || ds[0].Task.ID != kept {
		t.Fatalf("late claim: %v %v", ds, err)
	}
	r2, err := s.Recover(ctx, 1, 1, RecoverArgs{Limit: 10, Candidates: r1.Candidates})
	if err != nil || r2.Redelivered != 1 || len(r2.Failed) != 1 || r2.Failed[0] != (QueueFailures{Queue: "mail", Retried: 1}) {
		t.Fatalf("second pass: %+v %v", r2, err)
	}
	// The lost one may have run: a failed attempt, retried with backoff.
	if info, err := s.Lookup(ctx, lost); err != nil || info.State != "scheduled" || info.Task.Attempts != 1 {
		t.Fatalf("stranded task: %+v %v", info, err)
	}
	// Nothing ready or pending is left, so nothing is a candidate.
	r3, _ := s.Recover(ctx, 1, 1, RecoverArgs{Limit: 10, Candidates: r2.Candidates})
	if r3.Redelivered != 0 || len(r3.Candidates) != 0 || r3.Pending != 0 {
		t.Fatalf("third pass: %+v", r3)
	}
}

func TestRecoverTrimsDeadLetters(t *testing.T) {
	t.Parallel()
	s, rdb := newTestStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	for i := 0; i < 5; i++ {
		id := readyTask(t, s, 0, fmt.Sprintf("dl%d-", i), "default", 0)
		d := popClaim(t, s, []string{"default"}, 0)
		if _, err := s.Nack(ctx, NackArgs{Shard: s.Layout().ShardOf(id), ID: id, Token: d.Token, Err: "x", Dead: true}); err != nil {
			t.Fatal(err)
		}
	}
	r, err := s.Recover(ctx, 0, 1, RecoverArgs{Limit: 100, DeadMaxSize: 3})
	if err != nil || r.Trimmed != 2 || rdb.ZCard(ctx, s.k.Dead(0)).Val() != 3 {
		t.Fatalf("size bound: %+v %v", r, err)
	}
	testenv.WaitFor(t, 5*time.Second, "age bound trims the rest", func() (bool, string) {
		r, err = s.Recover(ctx, 0, 1, RecoverArgs{Limit: 100, DeadMaxAge: time.Millisecond})
		return err == nil && rdb.ZCard(ctx, s.k.Dead(0)).Val() == 0, fmt.Sprintf("%+v %v", r, err)
	})
	if rdb.HLen(ctx, s.k.Tasks(0)).Val() != 0 || rdb.HLen(ctx, s.k.DeadInfo(0)).Val() != 0 {
		t.Fatal("trimmed dead letters left data behind")
	}
}

func TestParseReady(t *testing.T) {
	t.Parallel()
	l, _ := NewLayout("hg", 4)
	for _, k := range l.ReadyKeys([]string{"a", "b.c:d"}) {
		sh, q, ok := l.ParseReady(k)
		if !ok || l.Ready(sh, q) != k {
			t.Errorf("ParseReady(%q) = %d %q %v", k, sh, q, ok)
		}
	}
	for _, bad := range []string{"", "{hg:9}:ready:a", "{other:1}:ready:a", "{hg:1}:delayed"} {
		if _, _, ok := l.ParseReady(bad); ok {
			t.Errorf("ParseReady(%q) accepted", bad)
		}
	}
}

func TestAckBatchAcrossShards(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	var acks []AckArgs
	for sh := 0; sh < 4; sh++ {
		readyTask(t, s, sh, fmt.Sprintf("b%d-", sh), "default", -1)
	}
	for i := 0; i < 4; i++ {
		d := popClaim(t, s, []string{"default"}, 0)
		acks = append(acks, AckArgs{Shard: d.Shard, ID: d.Task.ID, Token: d.Token})
	}
	acks = append(acks, AckArgs{Shard: acks[0].Shard, ID: acks[0].ID, Token: "stale"})
	errs := s.AckBatch(ctx, acks)
	for i := 0; i < 4; i++ {
		if errs[i] != nil {
			t.Fatalf("ack %d: %v", i, errs[i])
		}
		if _, err := s.Lookup(ctx, acks[i].ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("acked task %s still stored", acks[i].ID)
		}
	}
	if !errors.Is(errs[4], ErrStaleToken) {
		t.Fatalf("stale ack in a batch: %v", errs[4])
	}
}

// popEntry pops one entry of queue and returns its shard and the entry.
func popEntry(t *testing.T, s *Store, queue string) (int, string) {
	t.Helper()
	key, es, err := s.Pop(context.Background(), s.Layout().ReadyKeys([]string{queue}), 1, time.Second)
	if err != nil || len(es) != 1 {
		t.Fatalf("pop: %v %v", es, err)
	}
	sh, _, _ := s.Layout().ParseReady(key)
	return sh, es[0]
}

// TestUnleasedDeliveries: a popped entry carries its task, so it can run
// before any lease; acks, nacks and releases take its entry's number as
// the token, and a late lease keeps that token.
func TestUnleasedDeliveries(t *testing.T) {
	t.Parallel()
	s, rdb := newTestStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	popped := func(prefix string, retries int) (string, Delivery) {
		t.Helper()
		id := readyTask(t, s, 0, prefix, "default", retries)
		sh, e := popEntry(t, s, "default")
		d, ok := s.Popped(sh, e, time.Now(), 0)
		if !ok || d.Task.ID != id || string(d.Task.Payload) != "p-"+id || !d.Unleased ||
			d.Deadline.Sub(d.Leased) != 30*time.Second || e != d.Token+"|"+id+"|"+rdb.HGet(ctx, s.k.Tasks(0), id).Val() {
			t.Fatalf("Popped(%q) = %+v, %v", e, d, ok)
		}
		return id, d
	}

	// Popped and running: lookup says active; an ack without the queue
	// finds no lease; with it, the task is done.
	id, d := popped("a", -1)
	if info, err := s.Lookup(ctx, id); err != nil || info.State != "active" {
		t.Fatalf("lookup of a popped task: %+v %v", info, err)
	}
	if err := s.Ack(ctx, d.AckArgs(false)); !errors.Is(err, ErrStaleToken) {
		t.Fatalf("ack as if leased: %v", err)
	}
	ack := func(id, token string) error {
		return s.AckBatch(ctx, []AckArgs{{Shard: 0, ID: id, Token: token, Queue: "default"}})[0]
	}
	if err := ack(id, d.Token); err != nil {
		t.Fatal(err)
	}
	if err := ack(id, d.Token); !errors.Is(err, ErrStaleToken) {
		t.Fatalf("second ack: %v", err)
	}
	for _, k := range []string{s.k.Tasks(0), s.k.Pending(0, "default"), s.k.Ready(0, "default"), s.k.Inflight(0), s.k.Leases(0)} {
		if n, _ := rdb.Exists(ctx, k).Result(); n != 0 {
			t.Errorf("%s left behind", k)
		}
	}

	// A nack counts an attempt and reschedules.
	id, d = popped("n", -1)
	if r, err := s.Nack(ctx, d.NackArgs(true, "boom")); err != nil || r.Dead || r.Attempts != 1 {
		t.Fatalf("nack: %+v %v", r, err)
	}
	if info, _ := s.Lookup(ctx, id); info.State != "scheduled" || info.Task.Attempts != 1 {
		t.Fatalf("after nack: %+v", info)
	}

	// Leased late (the handler outlived LeaseAfter): same token; the ack
	// names the queue (it raced the lease) and still lands.
	id, d = popped("l", -1)
	ds, err := s.Claim(ctx, 0, "default", []string{EntryRef(d.Token + "|" + id + "|whatever")}, time.Minute)
	if err != nil || len(ds) != 1 || ds[0].Token != d.Token || ds[0].Unleased {
		t.Fatalf("late lease: %+v %v", ds, err)
	}
	// Claiming the same entry again (the first reply was lost) returns the
	// same lease, unchanged.
	again, err := s.Claim(ctx, 0, "default", []string{d.Ref()}, time.Hour)
	if err != nil || len(again) != 1 || again[0].Token != d.Token || !again[0].Deadline.Equal(ds[0].Deadline) {
		t.Fatalf("claim retried: %+v %v (first %+v)", again, err, ds)
	}
	if err := ack(id, d.Token); err != nil {
		t.Fatalf("ack after the late lease: %v", err)
	}
	if n := rdb.ZCard(ctx, s.k.Inflight(0)).Val() + rdb.HLen(ctx, s.k.Leases(0)).Val(); n != 0 {
		t.Fatalf("lease left behind: %d", n)
	}

	// Released at shutdown: ready again under a new number; the old
	// token is stale.
	id, d = popped("r", -1)
	if err := s.Release(ctx, d); err != nil {
		t.Fatal(err)
	}
	_, e := popEntry(t, s, "default")
	d2, ok := s.Popped(0, e, time.Now(), time.Second)
	if !ok || d2.Task.ID != id || d2.Token == d.Token || d2.Deadline.Sub(d2.Leased) != time.Second {
		t.Fatalf("released task popped again: %+v %v", d2, ok)
	}
	if err := ack(id, d.Token); !errors.Is(err, ErrStaleToken) {
		t.Fatalf("ack with the released token: %v", err)
	}
	if err := ack(id, d2.Token); err != nil {
		t.Fatal(err)
	}

	// Entries Popped cannot use are left to Claim.
	for _, e := range []string{"", "7", "7|x", "x|y|1|default|0|0|5|1|1|p", "7|x|zzz", "7|a|b|1|default", "7||1|default|0|0|5|1|1|p"} {
		if d, ok := s.Popped(0, e, time.Now(), 0); ok {
			t.Errorf("Popped(%q) = %+v", e, d)
		}
	}
}

// TestStrandedUnleasedBuriedWhenRetriesSpent: a popped task whose worker
// vanished counts an attempt; with none left it is dead-lettered with the
// reason, never redelivered forever.
func TestStrandedUnleasedBuriedWhenRetriesSpent(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	id := readyTask(t, s, 0, "poison", "default", 0)
	popEntry(t, s, "default")
	r1, err := s.Recover(ctx, 0, 1, RecoverArgs{Limit: 10})
	if err != nil || len(r1.Candidates) != 1 {
		t.Fatalf("first pass: %+v %v", r1, err)
	}
	if r2, err := s.Recover(ctx, 0, 1, RecoverArgs{Limit: 10, Candidates: r1.Candidates}); err != nil || r2.Redelivered != 1 {
		t.Fatalf("second pass: %+v %v", r2, err)
	}
	info, err := s.Lookup(ctx, id)
	if err != nil || info.State != "dead" || !strings.Contains(info.DeadInfo, "worker lost the task before leasing it") {
		t.Fatalf("stranded task with no retries left: %+v %v", info, err)
	}
}

// TestGarbageHeadIsNotAPop: a hand-written entry without a number at the
// head of a ready list proves nothing about the pending ids behind it:
// recovery leaves them, cancel and lookup see them ready.
func TestGarbageHeadIsNotAPop(t *testing.T) {
	t.Parallel()
	s, rdb := newTestStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	id := readyTask(t, s, 0, "behind", "default", -1)
	rdb.LPush(ctx, s.k.Ready(0, "default"), "garbage")
	r1, err := s.Recover(ctx, 0, 1, RecoverArgs{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if r2, err := s.Recover(ctx, 0, 1, RecoverArgs{Limit: 10, Candidates: r1.Candidates}); err != nil || r2.Redelivered != 0 {
		t.Fatalf("second pass: %+v %v", r2, err)
	}
	if info, err := s.Lookup(ctx, id); err != nil || info.State != "ready" || info.Task.Attempts != 0 {
		t.Fatalf("task behind a garbage head: %+v %v", info, err)
	}
	if state, err := s.Cancel(ctx, id); err != nil || state != "ready" {
		t.Fatalf("cancel behind a garbage head: %q %v", state, err)
	}
}

// TestBatchesBeyondChunk: move, claim (first and retried) and ack take
// batches of more ids than one command gets (lib.lua's bulk_read splits
// them by 1000), for leased deliveries and for ones run before a lease.
func TestBatchesBeyondChunk(t *testing.T) {
	t.Parallel()
	s, rdb := newTestStore(t)
	ctx := testenv.Ctx(t, 60*time.Second)
	const n = 2100
	readyAll := func(prefix string) []string {
		t.Helper()
		var as []EnqueueArgs
		for _, id := range shardIDs(s.Layout(), 0, prefix, n) {
			as = append(as, EnqueueArgs{ID: id, Queue: "default", Payload: []byte("p-" + id)})
		}
		for _, r := range s.EnqueueBatch(ctx, as) {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		if r, err := s.Move(ctx, 0, 1, 5000); err != nil || r.Moved != n {
			t.Fatalf("move: %+v %v, want %d moved in one call", r, err, n)
		}
		_, es, err := s.Pop(ctx, s.Layout().ReadyKeys([]string{"default"}), n, time.Second)
		if err != nil || len(es) != n {
			t.Fatalf("pop: %d entries, %v", len(es), err)
		}
		return es
	}
	ackAll := func(as []AckArgs) {
		t.Helper()
		for i, err := range s.AckBatch(ctx, as) {
			if err != nil {
				t.Fatalf("ack %d (%s): %v", i, as[i].ID, err)
			}
		}
		if left := rdb.HLen(ctx, s.Layout().Tasks(0)).Val(); left != 0 {
			t.Fatalf("%d tasks left after acking all", left)
		}
	}

	// Leased first: one claim of every entry, then the same claim again
	// (its reply lost), then one ack call for all.
	es := readyAll("l")
	refs := make([]string, n)
	for i, e := range es {
		refs[i] = EntryRef(e)
	}
	ds, err := s.Claim(ctx, 0, "default", refs, time.Minute)
	if err != nil || len(ds) != n {
		t.Fatalf("claim: %d deliveries, %v", len(ds), err)
	}
	again, err := s.Claim(ctx, 0, "default", refs, time.Minute)
	if err != nil || len(again) != n || again[n-1].Token != ds[n-1].Token {
		t.Fatalf("claim retried: %d deliveries, %v", len(again), err)
	}
	as := make([]AckArgs, n)
	for i, d := range ds {
		as[i] = AckArgs{Shard: 0, ID: d.Task.ID, Token: d.Token}
	}
	ackAll(as)

	// Run before a lease: acked by entry number through the pending set.
	for i, e := range readyAll("u") {
		d, ok := s.Popped(0, e, time.Now(), 0)
		if !ok {
			t.Fatalf("entry %q", e)
		}
		as[i] = AckArgs{Shard: 0, ID: d.Task.ID, Token: d.Token, Queue: "default"}
	}
	ackAll(as)
}

// TestCancelDeadTask: a dead-lettered task can be cancelled: its data,
// burial record and last error go, lookup no longer finds it, and its id
// can be enqueued again.
func TestCancelDeadTask(t *testing.T) {
	t.Parallel()
	s, rdb := newTestStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	id := readyTask(t, s, 3, "dead", "default", -1)
	d := popClaim(t, s, []string{"default"}, time.Minute)
	a := d.NackArgs(false, "poison")
	a.Dead = true
	if res, err := s.Nack(ctx, a); err != nil || !res.Dead {
		t.Fatalf("bury: %+v %v", res, err)
	}
	if info, err := s.Lookup(ctx, id); err != nil || info.State != "dead" {
		t.Fatalf("before cancel: %+v %v", info, err)
	}
	if st, err := s.Cancel(ctx, id); err != nil || st != "dead" {
		t.Fatalf("cancel dead: %q %v, want state dead", st, err)
	}
	if _, err := s.Lookup(ctx, id); !errors.Is(err, ErrNotFound) {
		t.Fatalf("lookup after cancel: %v", err)
	}
	l := s.Layout()
	for _, k := range []string{l.Tasks(3), l.Dead(3), l.DeadInfo(3), l.Errors(3)} {
		if n := rdb.Exists(ctx, k).Val(); n != 0 {
			t.Errorf("%s still holds data after the cancel", k)
		}
	}
	if r := s.Enqueue(ctx, EnqueueArgs{ID: id, Queue: "default", MaxRetries: -1}); r.Err != nil {
		t.Fatalf("re-enqueue after cancelling the dead task: %v", r.Err)
	}
}
