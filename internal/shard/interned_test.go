package shard

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestTaskEncodings: a namespace registered by a version that wrote only
// version 1 stays on it under "auto"; set to 2, enqueues write the
// 24-byte header with the queue's number while the version 1 tasks stay
// readable, and every script and Go reader handles both side by side (a
// nacked task keeps its version); set back to 1, enqueues write version 1
// again and version 2 data stays readable. A namespace registered for
// the first time under "auto" writes version 2.
func TestTaskEncodings(t *testing.T) {
	t.Parallel()
	rdb := testenv.StartRedis(t).Client(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	l, err := NewLayout("hgenc", 1)
	if err != nil {
		t.Fatal(err)
	}
	policies := map[string]QueuePolicy{"default": {MaxRetries: 3, Timeout: 30 * time.Second, MaxPayload: 1024}}
	register := func(e TaskEncoding) *Store {
		t.Helper()
		s := NewStore(rdb, l)
		s.SetTaskEncoding(e)
		if err := s.RegisterQueues(ctx, policies); err != nil {
			t.Fatal(err)
		}
		return s
	}
	payload := bytes.Repeat([]byte("p"), 100)
	enqueue := func(s *Store, id string, wantVersion byte) {
		t.Helper()
		if r := s.Enqueue(ctx, EnqueueArgs{ID: id, Queue: "default", Payload: payload, MaxRetries: -1}); r.Err != nil {
			t.Fatalf("enqueue %s: %v", id, r.Err)
		}
		blob, err := rdb.HGet(ctx, l.Tasks(0), id).Bytes()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case wantVersion == 1 && !bytes.HasPrefix(blob, []byte("1|default|0|3|30000|")):
			t.Fatalf("%s stored as %q, want version 1", id, blob)
		case wantVersion == 2 && (blob[0] != 2 || len(blob) != v2Header+len(payload)):
			t.Fatalf("%s stored as %q (%d bytes), want version 2: %d bytes", id, blob, len(blob), v2Header+len(payload))
		}
	}

	s := register(EncodingText)
	enqueue(s, "v1a", 1)
	enqueue(register(EncodingAuto), "v1b", 1) // registered before: stays on version 1
	s = register(EncodingCompact)
	enqueue(s, "v2a", 2)
	enqueue(register(EncodingAuto), "v2b", 2) // the namespace's choice is kept

	if r, err := s.Move(ctx, 0, 1, 100); err != nil || r.Moved != 4 {
		t.Fatalf("move: %+v, %v", r, err)
	}
	var ds []Delivery
	for len(ds) < 4 {
		_, entries, err := s.Pop(ctx, l.ReadyKeys([]string{"default"}), 10, time.Second)
		if err != nil || len(entries) == 0 {
			t.Fatalf("pop: %v, %v", entries, err)
		}
		refs := make([]string, len(entries))
		for i, e := range entries {
			refs[i] = EntryRef(e)
			if d, ok := s.Popped(0, e, time.Now(), 0); !ok || d.Task.Queue != "default" || !bytes.Equal(d.Task.Payload, payload) {
				t.Fatalf("popped entry %q read as %+v, %v", e, d.Task, ok)
			}
		}
		got, err := s.Claim(ctx, 0, "default", refs, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, got...)
	}
	byID := map[string]Delivery{}
	for _, d := range ds {
		if d.DecodeErr != nil || d.Task.Queue != "default" || d.Task.Attempts != 0 || d.Task.MaxRetries != 3 ||
			d.Task.Timeout != 30*time.Second || !bytes.Equal(d.Task.Payload, payload) || d.Task.Due.IsZero() {
			t.Fatalf("claimed %+v (%v)", d.Task, d.DecodeErr)
		}
		byID[d.Task.ID] = d
	}
	// One task of each version fails and is retried: it keeps its version.
	for _, id := range []string{"v1a", "v2a"} {
		if _, err := s.Nack(ctx, byID[id].NackArgs(false, "boom")); err != nil {
			t.Fatalf("nack %s: %v", id, err)
		}
		info, err := s.Lookup(ctx, id)
		if err != nil || info.State != "scheduled" || info.Task.Attempts != 1 || info.Task.Queue != "default" || !bytes.Equal(info.Task.Payload, payload) {
			t.Fatalf("lookup of retried %s: %+v, %v", id, info, err)
		}
		blob := rdb.HGet(ctx, l.Tasks(0), id).Val()
		if v := map[bool]string{true: "2", false: "1"}[blob[0] == 2]; v != id[1:2] {
			t.Fatalf("retried %s stored in version %s: %q", id, v, blob)
		}
	}
	for _, id := range []string{"v1b", "v2b"} {
		if err := s.AckBatch(ctx, []AckArgs{byID[id].AckArgs(false)})[0]; err != nil {
			t.Fatalf("ack %s: %v", id, err)
		}
	}
	if c := countsOf(t, ctx, rdb, l, 0); c["s|default"] != 2 || c["l|default"] != 0 {
		t.Fatalf("counts %v: want the two retried tasks scheduled and none leased", c)
	}
	es, _, _, err := s.PageSet(ctx, 0, SetDelayed, Cursor{}, 100, Filter{})
	if err != nil || len(es) != 2 {
		t.Fatalf("delayed page: %v, %v", es, err)
	}
	for _, e := range es {
		if v := e.View("scheduled", 0); v.Queue != "default" || v.Attempts != 1 {
			t.Fatalf("listed %s as %+v", e.ID, v)
		}
	}

	s = register(EncodingText) // back to version 1: version 2 data stays readable
	enqueue(s, "v1c", 1)
	if info, err := s.Lookup(ctx, "v2a"); err != nil || info.Task.Queue != "default" || info.DecodeErr != nil {
		t.Fatalf("lookup of v2a after turning version 2 off: %+v, %v", info, err)
	}

	fresh, err := NewLayout("hgenc2", 1)
	if err != nil {
		t.Fatal(err)
	}
	s = NewStore(rdb, fresh)
	if err := s.RegisterQueues(ctx, policies); err != nil {
		t.Fatal(err)
	}
	if r := s.Enqueue(ctx, EnqueueArgs{ID: "new", Queue: "default", Payload: payload, MaxRetries: -1}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if blob := rdb.HGet(ctx, fresh.Tasks(0), "new").Val(); blob[0] != 2 {
		t.Fatalf("a new namespace under auto stored %q, want version 2", blob)
	}
}

// TestQueueNumbersAreGlobal: schedulers registering different sets of
// queues concurrently give each queue one number in every shard, and an
// unknown number in task data is reported, not misread.
func TestQueueNumbersAreGlobal(t *testing.T) {
	t.Parallel()
	rdb := testenv.StartRedis(t).Client(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	l, err := NewLayout("hgnum", 4)
	if err != nil {
		t.Fatal(err)
	}
	p := QueuePolicy{MaxRetries: 1, Timeout: time.Second, MaxPayload: 10}
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		go func() {
			qs := map[string]QueuePolicy{}
			for j := 0; j < 8; j++ {
				qs[fmt.Sprintf("q%d", (i+j)%12)] = p
			}
			errs <- NewStore(rdb, l).RegisterQueues(ctx, qs)
		}()
	}
	for i := 0; i < 8; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]string{}
	for sh := 0; sh < 4; sh++ {
		reg := rdb.HGetAll(ctx, l.Queues(sh)).Val()
		for f, v := range reg {
			q, ok := strings.CutPrefix(f, queueIDPrefix)
			if !ok {
				continue
			}
			if reg[queueNamePrefix+v] != q {
				t.Errorf("shard %d: %s has number %s, whose name is %q", sh, q, v, reg[queueNamePrefix+v])
			}
			if n, ok := seen[q]; ok && n != v {
				t.Errorf("%s has numbers %s and %s", q, n, v)
			}
			seen[q] = v
		}
	}
	if len(seen) != 12 {
		t.Fatalf("%d queues numbered, want 12: %v", len(seen), seen)
	}
	s := NewStore(rdb, l)
	blob := EncodeV2(Task{Queue: "?", Payload: []byte("x"), Due: time.Now(), Enqueued: time.Now()}, 999)
	if _, err := s.DecodeIn(0, "x", blob); err == nil || !strings.Contains(err.Error(), "unknown queue number 999") {
		t.Fatalf("decode of an unknown number: %v", err)
	}
	if _, err := s.DecodeIn(0, "x", blob[:10]); err == nil {
		t.Fatal("decode of a cut version 2 header succeeded")
	}
}

// TestEncodeV2RoundTrip: Go reads what EncodeV2 writes (the layout
// enqueue.lua writes with struct.pack), the largest numbers the enqueue
// script accepts included.
func TestEncodeV2RoundTrip(t *testing.T) {
	t.Parallel()
	in := Task{ID: "x", Queue: "mail", Attempts: 1001, MaxRetries: 1000, Timeout: 9999999999 * time.Millisecond,
		Due: time.UnixMilli(9999999999999), Enqueued: time.UnixMilli(1764290000123), Payload: []byte("a|b\x00c")}
	blob := EncodeV2(in, 65535)
	if len(blob) != v2Header+len(in.Payload) || blob[0] != 2 {
		t.Fatalf("encoded %q", blob)
	}
	names := func(qid uint16) (string, error) {
		if qid != 65535 {
			return "", nil
		}
		return "mail", nil
	}
	out, err := DecodeWith("x", blob, names)
	if err != nil || out.Queue != in.Queue || out.Attempts != in.Attempts || out.MaxRetries != in.MaxRetries ||
		out.Timeout != in.Timeout || !out.Due.Equal(in.Due) || !out.Enqueued.Equal(in.Enqueued) || !bytes.Equal(out.Payload, in.Payload) {
		t.Fatalf("decoded %+v, %v; want %+v", out, err, in)
	}
	if _, err := Decode("x", blob); !errors.Is(err, ErrUndecodable) {
		t.Fatalf("Decode without queue names: %v, want ErrUndecodable", err)
	}
	// A name that cannot be read is not the data's fault: the error does
	// not say undecodable, so that a worker retries the task instead of
	// dead-lettering it.
	down := errors.New("connection refused")
	if _, err := DecodeWith("x", blob, func(uint16) (string, error) { return "", down }); !errors.Is(err, down) || errors.Is(err, ErrUndecodable) {
		t.Fatalf("decode while the name cannot be read: %v", err)
	}
}

// TestNoQueuesHashWritesNothing: a script that would read a version 2
// task's queue name while the shard's queues hash is missing (a slot
// migration, or a lost registry) fails with TRYAGAIN having written
// nothing, whatever it would have written first: the claim does not take
// the entry, the nack, release and ack do not end the lease. Once the
// registry is written again each succeeds.
func TestNoQueuesHashWritesNothing(t *testing.T) {
	t.Parallel()
	s, rdb := newTestStore(t) // a new namespace: version 2
	ctx := testenv.Ctx(t, 30*time.Second)
	l := s.Layout()
	sh := 0
	ids := idsIn(s, sh, 4, "nq")
	for _, id := range ids {
		if r := s.Enqueue(ctx, EnqueueArgs{ID: id, Queue: "default", Payload: []byte("x"), MaxRetries: -1}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if r, err := s.Move(ctx, sh, 1, 100); err != nil || r.Moved != 4 {
		t.Fatalf("move: %+v, %v", r, err)
	}
	_, entries, err := s.Pop(ctx, []string{l.Ready(sh, "default")}, 4, time.Second)
	if err != nil || len(entries) != 4 {
		t.Fatalf("pop: %v, %v", entries, err)
	}
	refs := make([]string, len(entries))
	for i, e := range entries {
		refs[i] = EntryRef(e)
	}
	reg := rdb.HGetAll(ctx, l.Queues(sh)).Val()
	drop := func() {
		t.Helper()
		if err := rdb.Del(ctx, l.Queues(sh)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	restore := func() {
		t.Helper()
		if err := rdb.HSet(ctx, l.Queues(sh), reg).Err(); err != nil {
			t.Fatal(err)
		}
	}
	tryagain := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "TRYAGAIN") {
			t.Fatalf("%s without the queues hash: %v, want TRYAGAIN", what, err)
		}
	}
	drop()
	before := rdb.ZCard(ctx, l.Pending(sh, "default")).Val()
	_, err = s.Claim(ctx, sh, "default", refs, time.Minute)
	tryagain("claim", err)
	if n := rdb.ZCard(ctx, l.Pending(sh, "default")).Val(); n != before || rdb.HLen(ctx, l.Leases(sh)).Val() != 0 {
		t.Fatalf("the refused claim changed the pending set (%d -> %d) or leased", before, n)
	}
	restore()
	ds, err := s.Claim(ctx, sh, "default", refs, time.Minute)
	if err != nil || len(ds) != 4 {
		t.Fatalf("claim: %v, %v", ds, err)
	}
	drop()
	_, err = s.Nack(ctx, ds[0].NackArgs(false, "boom"))
	tryagain("nack", err)
	tryagain("release", s.Release(ctx, ds[1]))
	tryagain("ack", s.AckBatch(ctx, []AckArgs{ds[2].AckArgs(false)})[0])
	tryagain("ack of two", s.AckBatch(ctx, []AckArgs{ds[2].AckArgs(false), ds[3].AckArgs(false)})[1])
	if n := rdb.HLen(ctx, l.Leases(sh)).Val(); n != 4 {
		t.Fatalf("%d leases left after the refused calls, want 4", n)
	}
	restore()
	if _, err := s.Nack(ctx, ds[0].NackArgs(false, "boom")); err != nil {
		t.Fatalf("nack: %v", err)
	}
	if err := s.Release(ctx, ds[1]); err != nil {
		t.Fatalf("release: %v", err)
	}
	for _, err := range s.AckBatch(ctx, []AckArgs{ds[2].AckArgs(false), ds[3].AckArgs(false)}) {
		if err != nil {
			t.Fatalf("ack: %v", err)
		}
	}
	if c := countsOf(t, ctx, rdb, l, sh); c["l|default"] != 0 || c["s|default"] != 1 {
		t.Fatalf("counts %v: want none leased and the nacked task scheduled", c)
	}
}

// TestShardZeroLosesItsRegistry: a shard 0 whose queues hash is lost (its
// node restarted without its data, a hand edit) while other shards keep
// theirs and their tasks gets every queue's number again from them, and
// the namespace's encoding; a task of another shard keeps its queue.
func TestShardZeroLosesItsRegistry(t *testing.T) {
	t.Parallel()
	rdb := testenv.StartRedis(t).Client(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	l, err := NewLayout("hglost", 2)
	if err != nil {
		t.Fatal(err)
	}
	p := QueuePolicy{MaxRetries: 1, Timeout: time.Second, MaxPayload: 10}
	register := func(qs ...string) {
		t.Helper()
		m := map[string]QueuePolicy{}
		for _, q := range qs {
			m[q] = p
		}
		if err := NewStore(rdb, l).RegisterQueues(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	register("b")
	register("a") // b is 1, a is 2
	s := NewStore(rdb, l)
	id := idsIn(s, 1, 1, "lost")[0]
	if r := s.Enqueue(ctx, EnqueueArgs{ID: id, Queue: "a", Payload: []byte("x"), Delay: time.Hour, MaxRetries: -1}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if err := rdb.Del(ctx, l.Queues(0)).Err(); err != nil {
		t.Fatal(err)
	}
	// Go reads a name from the data's own shard, not shard 0.
	if info, err := NewStore(rdb, l).Lookup(ctx, id); err != nil || info.DecodeErr != nil || info.Task.Queue != "a" {
		t.Fatalf("the task of queue a, with shard 0's registry lost, reads as %+v, %v", info, err)
	}
	register("a", "b") // sorted: a first, which would get 1 on an empty registry
	reg := rdb.HGetAll(ctx, l.Queues(0)).Val()
	if reg["|num|a"] != "2" || reg["|num|b"] != "1" || reg["|encoding"] != "2" || reg["|ids"] != "2" {
		t.Fatalf("shard 0's registry after the loss: %v", reg)
	}
	info, err := NewStore(rdb, l).Lookup(ctx, id)
	if err != nil || info.Task.Queue != "a" {
		t.Fatalf("the task of queue a reads as %+v, %v", info.Task, err)
	}
	// A shard that names a number otherwise than shard 0 stops the
	// registration instead of relabelling tasks.
	if err := rdb.HSet(ctx, l.Queues(1), "|q|1", "a").Err(); err != nil {
		t.Fatal(err)
	}
	if err := NewStore(rdb, l).RegisterQueues(ctx, map[string]QueuePolicy{"a": p}); err == nil {
		t.Fatal("registration over conflicting numbers succeeded")
	}
}

// TestQueueAddedAtRunTimeGetsANumber: a queue added at run time
// (SetQueue, inspect's queue set) is numbered as at registration and its
// tasks are written in version 2; once removed and without tasks in a
// shard, its name and number go with its registration there.
func TestQueueAddedAtRunTimeGetsANumber(t *testing.T) {
	t.Parallel()
	s, rdb := newTestStore(t) // a new namespace: version 2
	ctx := testenv.Ctx(t, 30*time.Second)
	l := s.Layout()
	if _, err := s.SetQueue(ctx, "late", QueuePolicy{MaxRetries: 1, Timeout: time.Second, MaxPayload: 10}); err != nil {
		t.Fatal(err)
	}
	id := idsIn(s, 0, 1, "late")[0]
	if r := s.Enqueue(ctx, EnqueueArgs{ID: id, Queue: "late", Payload: []byte("x"), Delay: time.Hour, MaxRetries: -1}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if blob := rdb.HGet(ctx, l.Tasks(0), id).Val(); blob[0] != 2 {
		t.Fatalf("a task of a queue added at run time stored as %q, want version 2", blob)
	}
	n := rdb.HGet(ctx, l.Queues(0), "|num|late").Val()
	if _, err := s.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveQueue(ctx, "late"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recover(ctx, 1, 1, RecoverArgs{Limit: 100}); err != nil {
		t.Fatal(err)
	}
	reg := rdb.HGetAll(ctx, l.Queues(1)).Val()
	if _, ok := reg["late"]; ok || reg["|q|"+n] != "" || reg["|id|late"] != "" {
		t.Fatalf("shard 1's registry after the removed queue drained: %v", reg)
	}
}

// TestStagingFollowsTheEncoding: movers may stage (StagingAllowed) while
// the namespace writes version 2, as the store's registration found it,
// and RefreshEncoding sees another process switch it back to version 1.
func TestStagingFollowsTheEncoding(t *testing.T) {
	t.Parallel()
	s, rdb := newTestStore(t) // a new namespace: version 2
	ctx := testenv.Ctx(t, 10*time.Second)
	if !s.StagingAllowed() {
		t.Fatal("a namespace registered on version 2: staging not allowed")
	}
	other := NewStore(rdb, s.Layout())
	other.SetTaskEncoding(EncodingText)
	if err := other.RegisterQueues(ctx, map[string]QueuePolicy{"default": {MaxRetries: 3, Timeout: 30 * time.Second, MaxPayload: 1024}}); err != nil {
		t.Fatal(err)
	}
	if other.StagingAllowed() {
		t.Error("the store that switched the namespace to version 1 allows staging")
	}
	if err := s.RefreshEncoding(ctx); err != nil {
		t.Fatal(err)
	}
	if s.StagingAllowed() {
		t.Error("after RefreshEncoding of a namespace switched to version 1: staging allowed")
	}
}
