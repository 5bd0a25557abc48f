package shard

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// newTestStore starts a Redis and returns a store with 4 shards and the
// queues "default" (max payload 1 KiB) and "mail" registered.
func newTestStore(t *testing.T) (*Store, *redis.Client) {
	t.Helper()
	r := testenv.StartRedis(t)
	rdb := r.Client(t)
	l, err := NewLayout("hgtest", 4)
	if err != nil {
		t.Fatal(err)
	}
	s := NewStore(rdb, l)
	err = s.RegisterQueues(context.Background(), map[string]QueuePolicy{
		"default": {MaxRetries: 3, Timeout: 30 * time.Second, MaxPayload: 1024},
		"mail":    {MaxRetries: 7, Timeout: 5 * time.Second, MaxPayload: 1024},
	})
	if err != nil {
		t.Fatal(err)
	}
	return s, rdb
}

func TestEnqueueOutcomes(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	now := time.Now()

	ok := s.Enqueue(ctx, EnqueueArgs{ID: "a", Queue: "default", Payload: []byte("x"), Delay: time.Minute, MaxRetries: -1})
	if ok.Err != nil {
		t.Fatalf("enqueue: %v", ok.Err)
	}
	if d := ok.Due.Sub(now); d < 50*time.Second || d > 70*time.Second {
		t.Fatalf("due %v is not about a minute after %v", ok.Due, now)
	}

	cases := []struct {
		name string
		args EnqueueArgs
		want error
	}{
		{"duplicate", EnqueueArgs{ID: "a", Queue: "default", MaxRetries: -1}, ErrDuplicate},
		{"unknown queue", EnqueueArgs{ID: "b", Queue: "nope", MaxRetries: -1}, ErrUnknownQueue},
		{"payload too large", EnqueueArgs{ID: "c", Queue: "default", Payload: make([]byte, 1025), MaxRetries: -1}, ErrPayloadTooLarge},
		{"id with separator", EnqueueArgs{ID: "d|e", Queue: "default", MaxRetries: -1}, ErrInvalidArgument},
		{"empty id", EnqueueArgs{ID: "", Queue: "default", MaxRetries: -1}, ErrInvalidArgument},
		{"id too long", EnqueueArgs{ID: strings.Repeat("x", MaxIDLen+1), Queue: "default", MaxRetries: -1}, ErrInvalidArgument},
		{"payload at limit", EnqueueArgs{ID: "f", Queue: "default", Payload: make([]byte, 1024), MaxRetries: -1}, nil},
		{"retries out of range", EnqueueArgs{ID: "g", Queue: "default", MaxRetries: 1001}, ErrInvalidArgument},
		{"due beyond 13 digits", EnqueueArgs{ID: "h", Queue: "default", Due: time.UnixMilli(1e14), MaxRetries: -1}, ErrInvalidArgument},
		{"delay beyond 12 digits", EnqueueArgs{ID: "i", Queue: "default", Delay: time.Duration(1e12) * time.Millisecond, MaxRetries: -1}, ErrInvalidArgument},
		{"timeout beyond 10 digits", EnqueueArgs{ID: "j", Queue: "default", Timeout: time.Duration(1e10) * time.Millisecond, MaxRetries: -1}, ErrInvalidArgument},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := s.Enqueue(ctx, c.args)
			if c.want == nil && res.Err != nil || c.want != nil && !errors.Is(res.Err, c.want) {
				t.Fatalf("got %v, want %v", res.Err, c.want)
			}
		})
	}

	// The duplicate did not overwrite the original.
	info, err := s.Lookup(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if string(info.Task.Payload) != "x" || info.State != "scheduled" || info.Task.MaxRetries != 3 {
		t.Fatalf("original task changed: %+v", info)
	}
}

func TestEnqueueDefaultsAndOverrides(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	due := time.UnixMilli(time.Now().Add(time.Hour).UnixMilli())
	res := s.Enqueue(ctx, EnqueueArgs{ID: "m1", Queue: "mail", Due: due, MaxRetries: 0, Timeout: 1500 * time.Millisecond, Payload: []byte("p|q")})
	if res.Err != nil || !res.Due.Equal(due) {
		t.Fatalf("enqueue: %+v", res)
	}
	info, err := s.Lookup(ctx, "m1")
	if err != nil {
		t.Fatal(err)
	}
	want := Task{ID: "m1", Queue: "mail", MaxRetries: 0, Timeout: 1500 * time.Millisecond, Due: due, Payload: []byte("p|q")}
	got := info.Task
	if got.Queue != want.Queue || got.MaxRetries != 0 || got.Timeout != want.Timeout || !got.Due.Equal(due) || string(got.Payload) != "p|q" || !info.At.Equal(due) {
		t.Fatalf("lookup = %+v, want %+v", info, want)
	}
	res = s.Enqueue(ctx, EnqueueArgs{ID: "m2", Queue: "mail", MaxRetries: -1})
	info, _ = s.Lookup(ctx, "m2")
	if res.Err != nil || info.Task.MaxRetries != 7 || info.Task.Timeout != 5*time.Second {
		t.Fatalf("queue defaults not applied: %+v %v", info.Task, res.Err)
	}
}

func TestEnqueueBatch(t *testing.T) {
	t.Parallel()
	s, rdb := newTestStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	var as []EnqueueArgs
	for i := 0; i < 1000; i++ {
		as = append(as, EnqueueArgs{ID: fmt.Sprintf("t%d", i), Queue: "default", Delay: time.Hour, MaxRetries: -1})
	}
	as = append(as, EnqueueArgs{ID: "t0", Queue: "default", MaxRetries: -1}, EnqueueArgs{ID: "z", Queue: "bad", MaxRetries: -1})
	// The script is not cached yet: the batch must load it and succeed.
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	res := s.EnqueueBatch(ctx, as)
	for i := 0; i < 1000; i++ {
		if res[i].Err != nil {
			t.Fatalf("item %d: %v", i, res[i].Err)
		}
	}
	if !errors.Is(res[1000].Err, ErrDuplicate) || !errors.Is(res[1001].Err, ErrUnknownQueue) {
		t.Fatalf("tail results: %v / %v", res[1000].Err, res[1001].Err)
	}
	var total int64
	for sh := 0; sh < 4; sh++ {
		n, _ := rdb.ZCard(ctx, s.Layout().Delayed(sh)).Result()
		if n == 0 {
			t.Fatalf("shard %d got no task: ids are not spread", sh)
		}
		total += n
	}
	if total != 1000 {
		t.Fatalf("stored %d tasks, want 1000", total)
	}
}

// wakes listens on one shard's wake channel.
type wakes struct {
	t   *testing.T
	ctx context.Context
	rdb *redis.Client
	ch  string
	sub *redis.PubSub
}

// listenWakes subscribes to shard sh's wake channel; the subscription is
// closed when the test ends.
func listenWakes(t *testing.T, ctx context.Context, rdb *redis.Client, l Layout, sh int) *wakes {
	t.Helper()
	w := &wakes{t: t, ctx: ctx, rdb: rdb, ch: l.WakeChannel(sh), sub: rdb.SSubscribe(ctx, l.WakeChannel(sh))}
	t.Cleanup(func() { w.sub.Close() })
	if _, err := w.sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	return w
}

// expect fails the test unless the next wake-ups carry want, in order.
func (w *wakes) expect(want ...string) {
	w.t.Helper()
	for i, v := range want {
		m, err := w.sub.ReceiveMessage(w.ctx)
		if err != nil {
			w.t.Fatalf("wake-up %d: %v", i, err)
		}
		if m.Payload != v {
			w.t.Fatalf("wake-up %d carries %q, want %q", i, m.Payload, v)
		}
	}
}

// none fails the test if a wake-up is pending: it publishes a marker and
// checks that the marker is the next message.
func (w *wakes) none() {
	w.t.Helper()
	w.rdb.SPublish(w.ctx, w.ch, "marker")
	if m, err := w.sub.ReceiveMessage(w.ctx); err != nil || m.Payload != "marker" {
		w.t.Fatalf("unexpected wake-up: %v %v", m, err)
	}
}

func TestWakeOnlyOnNewHead(t *testing.T) {
	t.Parallel()
	s, rdb := newTestStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	l := s.Layout()
	ids := shardIDs(l, 0, "w", 3)
	w := listenWakes(t, ctx, rdb, l, 0)
	base := time.Now().Add(time.Hour).UnixMilli()
	enq := func(id string, due int64) {
		if r := s.Enqueue(ctx, EnqueueArgs{ID: id, Queue: "default", Due: time.UnixMilli(due), MaxRetries: -1}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	enq(ids[0], base)      // first task: new head
	enq(ids[1], base+1000) // later: no wake
	enq(ids[2], base-1000) // earlier: new head
	w.expect(fmt.Sprint(base), fmt.Sprint(base-1000))
	w.none()
}

// TestWakeOnTiedBatch: a batch whose tasks share one due time wakes the
// owner once, whichever of them Redis orders first (ties are ordered by
// member, not by position in the batch).
func TestWakeOnTiedBatch(t *testing.T) {
	t.Parallel()
	s, rdb := newTestStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	l := s.Layout()
	ids := shardIDs(l, 0, "tie", 5)
	sort.Sort(sort.Reverse(sort.StringSlice(ids))) // the first sent sorts last
	w := listenWakes(t, ctx, rdb, l, 0)
	due := time.Now().Add(time.Hour).UnixMilli()
	var as []EnqueueArgs
	for _, id := range ids {
		as = append(as, EnqueueArgs{ID: id, Queue: "default", Due: time.UnixMilli(due), MaxRetries: -1})
	}
	for i, r := range s.EnqueueBatch(ctx, as) {
		if r.Err != nil {
			t.Fatalf("task %d: %v", i, r.Err)
		}
	}
	w.expect(fmt.Sprint(due))
	w.none()
}

func TestMoveFencedBoundedAndBuries(t *testing.T) {
	t.Parallel()
	s, rdb := newTestStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	l := s.Layout()
	const sh = 1
	var due []string
	for i := 0; len(due) < 10; i++ {
		id := fmt.Sprintf("m%d", i)
		if l.ShardOf(id) != sh {
			continue
		}
		q := "default"
		if len(due)%2 == 1 {
			q = "mail"
		}
		if r := s.Enqueue(ctx, EnqueueArgs{ID: id, Queue: q, Due: time.Now().Add(-time.Second), MaxRetries: -1}); r.Err != nil {
			t.Fatal(r.Err)
		}
		due = append(due, id)
	}
	future := time.Now().Add(time.Hour).UnixMilli()
	var later string
	for i := 0; ; i++ {
		if later = fmt.Sprintf("later%d", i); l.ShardOf(later) == sh {
			break
		}
	}
	s.Enqueue(ctx, EnqueueArgs{ID: later, Queue: "default", Due: time.UnixMilli(future), MaxRetries: -1})
	// Garbage written by hand: a member without data and one with bad data.
	rdb.ZAdd(ctx, l.Delayed(sh), redis.Z{Score: 1, Member: "garbage-no-data"})
	rdb.ZAdd(ctx, l.Delayed(sh), redis.Z{Score: 2, Member: "garbage-bad-data"})
	rdb.HSet(ctx, l.Tasks(sh), "garbage-bad-data", "not a task")

	res, err := s.Move(ctx, sh, 5, 4)
	if err != nil {
		t.Fatal(err)
	}
	if res.Moved+res.Buried != 4 || res.Buried != 2 {
		t.Fatalf("first batch: %+v, want 4 examined with 2 buried", res)
	}
	for _, late := range res.Late {
		if late < 1000 {
			t.Fatalf("lateness %d ms, want >= 1000", late)
		}
	}
	// Older epoch: rejected and counted; nothing moves.
	if _, err := s.Move(ctx, sh, 4, 100); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("stale move: %v", err)
	}
	if n, _ := s.StaleEpochRejections(ctx, sh); n != 1 {
		t.Fatalf("stale rejections = %d, want 1", n)
	}
	res, err = s.Move(ctx, sh, 6, 100)
	if err != nil {
		t.Fatal(err)
	}
	if res.Moved != 8 || res.NextDue != future {
		t.Fatalf("second batch: %+v, want 8 moved and next due %d", res, future)
	}
	if e, _ := s.StoredEpoch(ctx, sh); e != 6 {
		t.Fatalf("stored epoch %d, want 6", e)
	}
	ready := append(rdb.LRange(ctx, l.Ready(sh, "default"), 0, -1).Val(), rdb.LRange(ctx, l.Ready(sh, "mail"), 0, -1).Val()...)
	if len(ready) != 10 {
		t.Fatalf("ready lists hold %d ids, want 10: %v", len(ready), ready)
	}
	// Hand-written members need not hash to the shard they were put in,
	// so read the shard's dead-letter set directly.
	for id, reason := range map[string]string{"garbage-no-data": "no task data", "garbage-bad-data": "undecodable task data"} {
		if _, err := rdb.ZScore(ctx, l.Dead(sh), id).Result(); err != nil {
			t.Fatalf("%s not in the dead-letter set: %v", id, err)
		}
		if info := rdb.HGet(ctx, l.DeadInfo(sh), id).Val(); !strings.Contains(info, reason) {
			t.Fatalf("%s: dead info %q lacks reason %q", id, info, reason)
		}
	}
	res, _ = s.Move(ctx, sh, 6, 100)
	if res.Moved != 0 || res.Buried != 0 {
		t.Fatalf("third batch moved again: %+v", res)
	}
}

func TestCancelAndLookupStates(t *testing.T) {
	t.Parallel()
	s, rdb := newTestStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	l := s.Layout()
	s.Enqueue(ctx, EnqueueArgs{ID: "sched", Queue: "default", Delay: time.Hour, MaxRetries: -1})
	s.Enqueue(ctx, EnqueueArgs{ID: "ready", Queue: "mail", MaxRetries: -1})
	s.Enqueue(ctx, EnqueueArgs{ID: "active", Queue: "default", Delay: time.Hour, MaxRetries: -1})
	sh := l.ShardOf("ready")
	testenv.WaitFor(t, 5*time.Second, "ready task moved", func() (bool, string) {
		r, err := s.Move(ctx, sh, 1, 10)
		return err == nil && r.Moved == 1, fmt.Sprintf("%+v %v", r, err)
	})
	// Simulate a lease (workers arrive in a later issue).
	ash := l.ShardOf("active")
	rdb.ZRem(ctx, l.Delayed(ash), "active")
	rdb.ZAdd(ctx, l.Inflight(ash), redis.Z{Score: float64(time.Now().Add(time.Minute).UnixMilli()), Member: "active"})

	for id, want := range map[string]string{"sched": "scheduled", "ready": "ready", "active": "active"} {
		info, err := s.Lookup(ctx, id)
		if err != nil || info.State != want {
			t.Fatalf("lookup %s: %+v %v, want %s", id, info, err, want)
		}
	}
	if _, err := s.Lookup(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("lookup unknown: %v", err)
	}
	if st, err := s.Cancel(ctx, "sched"); err != nil || st != "scheduled" {
		t.Fatalf("cancel scheduled: %s %v", st, err)
	}
	if st, err := s.Cancel(ctx, "ready"); err != nil || st != "ready" {
		t.Fatalf("cancel ready: %s %v", st, err)
	}
	if n := rdb.LLen(ctx, l.Ready(sh, "mail")).Val(); n != 0 {
		t.Fatalf("cancelled id still in ready list (%d)", n)
	}
	if st, err := s.Cancel(ctx, "active"); err != nil || st != "active" {
		t.Fatalf("cancel active: %s %v; want it cancelled from active", st, err)
	}
	if info, err := s.Lookup(ctx, "active"); err != nil || info.State != "cancelled" {
		t.Fatalf("lookup of the cancelled active task: %+v %v", info, err)
	}
	if _, err := s.Cancel(ctx, "sched"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("cancel twice: %v", err)
	}
	// A cancelled id is free again.
	if r := s.Enqueue(ctx, EnqueueArgs{ID: "sched", Queue: "default", MaxRetries: -1}); r.Err != nil {
		t.Fatalf("re-enqueue after cancel: %v", r.Err)
	}
}

func TestCodec(t *testing.T) {
	t.Parallel()
	in := Task{ID: "x", Queue: "q", Attempts: 2, MaxRetries: 5, Timeout: time.Second, Due: time.UnixMilli(1700000000123), Enqueued: time.UnixMilli(1700000000000), Payload: []byte("a|b\x00c")}
	out, err := Decode("x", Encode(in))
	if err != nil {
		t.Fatal(err)
	}
	if out.Queue != in.Queue || out.Attempts != 2 || out.MaxRetries != 5 || out.Timeout != time.Second ||
		!out.Due.Equal(in.Due) || !out.Enqueued.Equal(in.Enqueued) || string(out.Payload) != string(in.Payload) {
		t.Fatalf("round trip: %+v", out)
	}
	for _, bad := range []string{"", "garbage", "2|q|0|0|0|0|0|p", "1||0|0|0|0|0|p", "1|q|x|0|0|0|0|p", "1|q|0|0|0|0|p", "1|q|-1|0|0|0|0|p"} {
		if _, err := Decode("x", []byte(bad)); !errors.Is(err, ErrUndecodable) {
			t.Errorf("Decode(%q) = %v, want ErrUndecodable", bad, err)
		}
	}
}

// TestValidID: an enqueued id is 1..256 bytes of UTF-8 without "|" and
// without control characters (C0, DEL, C1); the rule for naming a stored
// task keeps the old one (length and "|" only).
func TestValidID(t *testing.T) {
	t.Parallel()
	for id, want := range map[string]bool{
		"order-42": true, "größe": true, "✓ done": true, "😀": true, "nbsp\u00a0": true, strings.Repeat("é", 128): true,
		"": false, strings.Repeat("x", 257): false, "a|b": false,
		"cr\r": false, "lf\n": false, "tab\t": false, "nul\x00": false, "esc\x1b[2J": false, "del\x7f": false,
		"nel\u0085": false, "csi\u009b": false, "bad\xff": false, "overlong\xc0\xaf": false, "surrogate\xed\xa0\x80": false,
		"above\xf4\x90\x80\x80": false, "cut\xe2\x9c": false,
	} {
		if got := ValidID(id); got != want {
			t.Errorf("ValidID(%q) = %v, want %v", id, got, want)
		}
		if stored := id != "" && len(id) <= MaxIDLen && !strings.Contains(id, "|"); ValidStoredID(id) != stored {
			t.Errorf("ValidStoredID(%q) = %v, want %v", id, !stored, stored)
		}
	}
}

// TestStoredControlIDsStayReachable: a task stored under an id that
// enqueue now refuses (stored before the rule) can still be looked up
// and cancelled.
func TestStoredControlIDsStayReachable(t *testing.T) {
	t.Parallel()
	s, rdb := newTestStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	const id = "old\r\nid\x1b"
	if r := s.Enqueue(ctx, EnqueueArgs{ID: id, Queue: "default", Delay: time.Hour, MaxRetries: -1}); !errors.Is(r.Err, ErrInvalidArgument) {
		t.Fatalf("enqueue of %q: %v, want ErrInvalidArgument", id, r.Err)
	}
	sh := s.Layout().ShardOf(id)
	due := time.Now().Add(time.Hour)
	blob := Encode(Task{ID: id, Queue: "default", MaxRetries: 3, Timeout: time.Second, Due: due, Enqueued: time.Now()})
	if err := rdb.HSet(ctx, s.Layout().Tasks(sh), id, blob).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ZAdd(ctx, s.Layout().Delayed(sh), redis.Z{Score: float64(due.UnixMilli()), Member: id}).Err(); err != nil {
		t.Fatal(err)
	}
	if in, err := s.Lookup(ctx, id); err != nil || in.State != "scheduled" {
		t.Fatalf("lookup: %+v %v", in, err)
	}
	if st, err := s.Cancel(ctx, id); err != nil || st != "scheduled" {
		t.Fatalf("cancel: %q %v", st, err)
	}
}

func TestLayout(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		ns string
		n  int
	}{{"", 1}, {"a b", 1}, {"ok", 0}, {"ok", MaxShards + 1}} {
		if _, err := NewLayout(c.ns, c.n); !errors.Is(err, ErrInvalidLayout) {
			t.Errorf("NewLayout(%q, %d) = %v", c.ns, c.n, err)
		}
	}
	l, _ := NewLayout("hg", 16)
	// Every key of a shard carries the same hash tag.
	for _, k := range []string{l.Delayed(3), l.Tasks(3), l.Ready(3, "q"), l.Inflight(3), l.Dead(3), l.DeadInfo(3), l.Epoch(3), l.Queues(3), l.Stats(3), l.WakeChannel(3)} {
		if !strings.HasPrefix(k, "{hg:3}:") {
			t.Errorf("key %q lacks the shard's hash tag", k)
		}
	}
	// Known value, shared with producers in other languages (zlib.crc32).
	if got := l.ShardOf("order-42"); got != 14 {
		t.Errorf("ShardOf(order-42) = %d", got)
	}
}

// TestEnqueueBatchOneShardManyCalls: a batch larger than one script call
// of a single shard is split and every task gets its own result; the wake
// channel hears once per call that creates a new earliest task.
func TestEnqueueBatchOneShardManyCalls(t *testing.T) {
	t.Parallel()
	s, rdb := newTestStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	var as []EnqueueArgs
	for i := 0; len(as) < 2*enqueueChunk+10; i++ {
		if id := fmt.Sprintf("one%d", i); s.Layout().ShardOf(id) == 2 {
			as = append(as, EnqueueArgs{ID: id, Queue: "default", Delay: time.Hour, MaxRetries: -1})
		}
	}
	as[enqueueChunk+3].Queue = "nope" // a failure in the middle of the second call
	res := s.EnqueueBatch(ctx, as)
	for i, r := range res {
		if i == enqueueChunk+3 {
			if !errors.Is(r.Err, ErrUnknownQueue) {
				t.Fatalf("item %d: %v, want ErrUnknownQueue", i, r.Err)
			}
			continue
		}
		if r.Err != nil || r.Due.IsZero() {
			t.Fatalf("item %d: %+v", i, r)
		}
	}
	if n := rdb.ZCard(ctx, s.Layout().Delayed(2)).Val(); n != int64(len(as)-1) {
		t.Fatalf("stored %d, want %d", n, len(as)-1)
	}
}

// loadMidPipeline is a go-redis hook that, on the first pipeline after it
// is armed,
// sends its first command alone, then loads src into Redis's script
// cache from another connection, then sends the rest: the interleaving of
// a batch in flight while another client loads the script.
type loadMidPipeline struct {
	loader *redis.Client
	src    string
	armed  atomic.Bool
}

func (h *loadMidPipeline) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *loadMidPipeline) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *loadMidPipeline) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) < 2 || !h.armed.CompareAndSwap(true, false) {
			return next(ctx, cmds)
		}
		err := next(ctx, cmds[:1])
		if lerr := h.loader.ScriptLoad(ctx, h.src).Err(); lerr != nil {
			return lerr
		}
		return errors.Join(err, next(ctx, cmds[1:]))
	}
}

// TestBatchOnColdScriptCacheRunsEachCallOnce: when the script cache is
// empty and another client loads the script while a batch is in flight,
// the first call is refused (NOSCRIPT) and the later ones run; only the
// refused call may be sent again, or the tasks of the others are
// reported as duplicates of themselves.
func TestBatchOnColdScriptCacheRunsEachCallOnce(t *testing.T) {
	t.Parallel()
	r := testenv.StartRedis(t)
	loader := r.Client(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer rdb.Close()
	hook := &loadMidPipeline{loader: loader, src: EnqueueScriptSource()}
	rdb.AddHook(hook)
	l, _ := NewLayout("hgtest", 4)
	s := NewStore(rdb, l)
	if err := s.RegisterQueues(ctx, map[string]QueuePolicy{"default": {MaxRetries: 1, Timeout: time.Second, MaxPayload: 1024}}); err != nil {
		t.Fatal(err)
	}
	if err := loader.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	hook.armed.Store(true)
	var as []EnqueueArgs
	for i := 0; i < 40; i++ { // spread over the 4 shards: 4 calls
		as = append(as, EnqueueArgs{ID: fmt.Sprintf("cold-%d", i), Queue: "default", Delay: time.Hour, MaxRetries: -1})
	}
	for i, res := range s.EnqueueBatch(ctx, as) {
		if res.Err != nil {
			t.Fatalf("task %d: %v", i, res.Err)
		}
	}
}

// refusedFirst is a go-redis hook for the first pipeline of script calls
// after it is armed: the call whose first key is first goes first, or,
// with first empty, a command of the hook's own that Redis refuses before
// it runs (TRYAGAIN, as during a slot migration on a Redis Cluster). Once
// that pipeline was answered, it runs after (if set). go-redis sends a
// pipeline whose first command was refused so again, whole.
type refusedFirst struct {
	first string
	after func()
	armed atomic.Bool
}

func (h *refusedFirst) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *refusedFirst) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *refusedFirst) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) < 2 || cmds[0].Name() != "evalsha" || !h.armed.CompareAndSwap(true, false) {
			return next(ctx, cmds)
		}
		if h.first == "" {
			refused := redis.NewCmd(ctx, "eval", "return redis.error_reply('TRYAGAIN refused before it ran')", 0)
			cmds = append([]redis.Cmder{refused}, cmds...)
		} else {
			sort.SliceStable(cmds, func(i, j int) bool { return cmds[i].Args()[3] == h.first && cmds[j].Args()[3] != h.first })
		}
		err := next(ctx, cmds)
		if h.after != nil {
			h.after()
		}
		return err
	}
}

// TestBatchEnqueueReportsEachTaskOnceWhenACallIsRefused: a batch's calls
// go in one pipeline; the first is refused before it runs (its shard is
// sealed for a change of the shard count; on a Redis Cluster, TRYAGAIN
// during a slot migration) and the others run. The refused call alone may
// be sent again: go-redis sent the whole pipeline again, and the tasks
// of the calls that had run were reported as duplicates of themselves.
func TestBatchEnqueueReportsEachTaskOnceWhenACallIsRefused(t *testing.T) {
	t.Parallel()
	r := testenv.StartRedis(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	rdb := r.Client(t)
	l, _ := NewLayout("hgtest", 4)
	if err := NewStore(rdb, l).RegisterQueues(ctx, map[string]QueuePolicy{"default": {MaxRetries: 1, Timeout: time.Second, MaxPayload: 1024}}); err != nil {
		t.Fatal(err)
	}
	if err := enqueueScript.Load(ctx, rdb).Err(); err != nil { // the first pipeline runs the calls
		t.Fatal(err)
	}
	marker := rdb.Get(ctx, l.Marker(1)).Val()
	if err := rdb.Set(ctx, l.Marker(1), "1|0|0", 0).Err(); err != nil { // sealed
		t.Fatal(err)
	}
	hook := &refusedFirst{first: l.Delayed(1), after: func() { rdb.Set(ctx, l.Marker(1), marker, 0) }}
	hooked := testenv.HookedClient(t, rdb, hook)
	s := NewStore(hooked, l)
	var as []EnqueueArgs
	for sh := range 4 {
		for _, id := range shardIDs(l, sh, "once-", 3) {
			as = append(as, EnqueueArgs{ID: id, Queue: "default", Delay: time.Hour, MaxRetries: -1})
		}
	}
	hook.armed.Store(true)
	for i, res := range s.EnqueueBatch(ctx, as) {
		if res.Err != nil {
			t.Errorf("%s (shard %d): %v, want it enqueued", as[i].ID, l.ShardOf(as[i].ID), res.Err)
		}
	}
	if hook.armed.Load() {
		t.Fatal("the hook never saw the batch")
	}
}

// TestBatchAckReportsEachAckOnceWhenACallIsRefused: as for enqueue, an
// ack batch whose first command was refused before it ran: the acks that
// ran are reported done, not stale (go-redis ran them again, and the
// second run found no lease).
func TestBatchAckReportsEachAckOnceWhenACallIsRefused(t *testing.T) {
	t.Parallel()
	s, rdb := newTestStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	var acks []AckArgs
	for sh := range 4 {
		readyTask(t, s, sh, fmt.Sprintf("once%d-", sh), "default", -1)
	}
	for range 4 {
		d := popClaim(t, s, []string{"default"}, 0)
		acks = append(acks, d.AckArgs(false))
	}
	if err := ackScript.Load(ctx, rdb).Err(); err != nil { // the first pipeline runs the calls
		t.Fatal(err)
	}
	hook := &refusedFirst{}
	hs := NewStore(testenv.HookedClient(t, rdb, hook), s.Layout())
	hook.armed.Store(true)
	for i, err := range hs.AckBatch(ctx, acks) {
		if err != nil {
			t.Errorf("ack of %s: %v, want it done", acks[i].ID, err)
		}
		if _, err := s.Lookup(ctx, acks[i].ID); !errors.Is(err, ErrNotFound) {
			t.Errorf("acked %s is still stored", acks[i].ID)
		}
	}
	if hook.armed.Load() {
		t.Fatal("the hook never saw the batch")
	}
}

// shardIDs returns the first n ids "<prefix><i>" that hash to shard sh.
func shardIDs(l Layout, sh int, prefix string, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		if id := fmt.Sprintf("%s%d", prefix, i); l.ShardOf(id) == sh {
			out = append(out, id)
		}
	}
	return out
}

// TestMoveProbe covers move.lua's head probe: a batch larger than the
// probe falls back to the score range, a batch bounded by LIMIT reports a
// due next task, and a call on a shard with nothing due costs a single
// ZRANGE, as does one moving a single task (the probe reads two entries,
// so it yields the next due time too).
func TestMoveProbe(t *testing.T) {
	t.Parallel()
	s, rdb := newTestStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	l := s.Layout()
	const sh = 3
	for _, id := range shardIDs(l, sh, "p", 39) {
		if r := s.Enqueue(ctx, EnqueueArgs{ID: id, Queue: "default", Due: time.Now().Add(-time.Second)}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	future := time.Now().Add(time.Hour).UnixMilli()
	if r := s.Enqueue(ctx, EnqueueArgs{ID: shardIDs(l, sh, "f", 1)[0], Queue: "default", Due: time.UnixMilli(future)}); r.Err != nil {
		t.Fatal(r.Err)
	}
	zranges := func() int64 { return testenv.CommandCalls(t, rdb)["zrange"] }
	for _, step := range []struct {
		limit, moved int
		nextDue      func(MoveResult) bool
		oneRead      bool // the probe alone answers: fewer due than it reads
	}{
		{5, 5, func(r MoveResult) bool { return r.NextDue <= r.Now }, false},   // beyond the probe, bounded by LIMIT
		{33, 33, func(r MoveResult) bool { return r.NextDue <= r.Now }, false}, // beyond the probe, bounded by LIMIT
		{100, 1, func(r MoveResult) bool { return r.NextDue == future }, true}, // the last one, and the future task
		{100, 0, func(r MoveResult) bool { return r.NextDue == future }, true}, // nothing due
		{1, 0, func(r MoveResult) bool { return r.NextDue == future }, true},   // nothing due, smallest LIMIT
	} {
		before := zranges()
		res, err := s.Move(ctx, sh, 1, step.limit)
		if err != nil {
			t.Fatal(err)
		}
		if res.Moved != step.moved || !step.nextDue(res) {
			t.Fatalf("limit %d: %+v, want %d moved (future task due %d)", step.limit, res, step.moved, future)
		}
		if n := zranges() - before; step.oneRead && n != 1 {
			t.Fatalf("limit %d, %d moved: ZRANGE ran %d times, want 1", step.limit, res.Moved, n)
		}
	}
	if n := rdb.LLen(ctx, l.Ready(sh, "default")).Val(); n != 39 {
		t.Fatalf("ready list holds %d, want 39", n)
	}
}
