package shard

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// afterHook runs fn once, right after the first command for which match
// returns true has been answered.
type afterHook struct {
	once  sync.Once
	match func(args []any) bool
	fn    func()
}

func (h *afterHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *afterHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if cmd.Err() == nil && h.match(cmd.Args()) {
			h.once.Do(h.fn)
		}
		return err
	}
}
func (h *afterHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			if c.Err() == nil && h.match(c.Args()) {
				h.once.Do(h.fn)
			}
		}
		return err
	}
}

// scriptOn matches an EVAL/EVALSHA of sc whose first key is key.
func scriptOn(sc script, key string) func([]any) bool {
	return func(a []any) bool {
		if len(a) < 4 {
			return false
		}
		name, _ := a[0].(string)
		sha, _ := a[1].(string)
		k, _ := a[3].(string)
		return ((name == "evalsha" && sha == sc.Hash()) || name == "eval") && k == key
	}
}

func hooked(t *testing.T, rdb *redis.Client, h redis.Hook) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr})
	t.Cleanup(func() { c.Close() })
	c.AddHook(h)
	return c
}

// Finding (fixed): Cancel read the new shard, then the old one. A batch
// exported, imported and committed between the two reads made Cancel
// answer ErrNotFound although the task was alive in its new shard (and
// would run). Cancel now reads the old shard first; the task is moved
// right after Cancel's first call, whichever shard it read.
func TestReviewCancelMissesATaskMovingBetweenItsTwoReads(t *testing.T) {
	s, rdb := newSizedStore(t, 4)
	ctx := testenv.Ctx(t, 30*time.Second)
	const old, nw = 1, 5
	id := movingIDs(4, 8, old, "cx", 1)[0]
	seedKinds(t, ctx, s, rdb, old, map[string]string{id: kSched})
	l, err := s.BeginResize(ctx, 8)
	if err != nil {
		t.Fatal(err)
	}
	// The owner of shard 1 moves the task (if it is still there) right
	// after Cancel's first call.
	anyCancel := func(a []any) bool {
		name, _ := a[0].(string)
		sha, _ := a[1].(string)
		return name == "evalsha" && sha == cancelScript.Hash()
	}
	h := &afterHook{match: anyCancel, fn: func() {
		r, err := s.Export(ctx, s.Layout(), old, rsEpoch, time.Second, []string{id})
		if err != nil {
			t.Errorf("export: %+v %v", r, err)
			return
		}
		if len(r.Tasks) == 0 {
			return // cancelled already
		}
		importAll(t, ctx, s, l, r.Tasks)
		if c, err := s.Commit(ctx, old, rsEpoch, []string{id}); err != nil || len(c) != 0 {
			t.Errorf("commit: %v %v", c, err)
		}
	}}
	if err := cancelScript.Load(ctx, rdb).Err(); err != nil { // one EVALSHA per call
		t.Fatal(err)
	}
	producer := NewStore(hooked(t, rdb, h), l)
	_, cerr := producer.Cancel(ctx, id)
	info, lerr := s.Lookup(ctx, id)
	if errors.Is(cerr, ErrNotFound) && lerr == nil {
		t.Fatalf("BUG: Cancel(%s) = ErrNotFound, but the task is %s in shard %d and will run", id, info.State, nw)
	}
}

// Finding: a cancel that removes an outbox entry, then a producer that
// enqueues the same id again before the owner's commit: the enqueue is
// told "duplicate" (by the imported copy), then the migration's unimport
// deletes that copy. The producer's task never runs; nothing is stored.
func TestReviewReEnqueueAfterCancelIsSwallowedByUnimport(t *testing.T) {
	s, rdb := newSizedStore(t, 4)
	ctx := testenv.Ctx(t, 30*time.Second)
	const old, nw = 1, 5
	id := movingIDs(4, 8, old, "ry", 1)[0]
	seedKinds(t, ctx, s, rdb, old, map[string]string{id: kSched})
	l, err := s.BeginResize(ctx, 8)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Export(ctx, s.Layout(), old, rsEpoch, time.Second, []string{id})
	if err != nil || len(r.Tasks) != 1 {
		t.Fatalf("export: %+v %v", r, err)
	}
	if st, err := s.Cancel(ctx, id); err != nil || st != "scheduled" {
		t.Fatalf("cancel: %q %v", st, err)
	}
	importAll(t, ctx, s, l, r.Tasks) // the owner goes on with its batch
	// The user enqueues the id again, after its cancel succeeded.
	res := s.Enqueue(ctx, EnqueueArgs{ID: id, Queue: "default", Delay: time.Hour, MaxRetries: -1, Payload: []byte("second")})
	cancelled, err := s.Commit(ctx, old, rsEpoch, []string{id})
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]Exported{}
	for _, e := range r.Tasks {
		byID[e.ID] = e
	}
	var undo []Exported
	for _, c := range cancelled {
		undo = append(undo, byID[c])
	}
	if err := s.Unimport(ctx, nw, undo); err != nil {
		t.Fatal(err)
	}
	if _, lerr := s.Lookup(ctx, id); errors.Is(res.Err, ErrDuplicate) && errors.Is(lerr, ErrNotFound) {
		t.Fatalf("BUG: the enqueue after the cancel was told %v, and then the task was deleted: nothing will run", res.Err)
	}
}

// Finding: a scheduler that registers its queues while a resize is
// "preparing" (after BeginResize copied shard 0's registrations into the
// new shards) registers them only in the old shards: the new shards never
// get the queue, and enqueues placed there fail with ErrUnknownQueue.
func TestReviewQueueRegisteredDuringPreparingMissesNewShards(t *testing.T) {
	s, rdb := newSizedStore(t, 4)
	ctx := testenv.Ctx(t, 30*time.Second)
	h := &afterHook{match: func(a []any) bool {
		n, _ := a[0].(string)
		k, _ := a[1].(string)
		return n == "hgetall" && k == s.k.Queues(0)
	}, fn: func() {
		// A scheduler starting now (new version, new queue "audit").
		sched := NewStore(rdb, *s.base)
		if _, err := sched.RefreshLayout(ctx); err != nil {
			t.Error(err)
		}
		if err := sched.RegisterQueues(ctx, map[string]QueuePolicy{"audit": {MaxRetries: 1, Timeout: time.Second, MaxPayload: 64}}); err != nil {
			t.Error(err)
		}
	}}
	op := NewStore(hooked(t, rdb, h), *s.base)
	l, err := op.BeginResize(ctx, 8)
	if err != nil {
		t.Fatal(err)
	}
	s.SetLayout(l)
	var missing []int
	for sh := 0; sh < 8; sh++ {
		if !rdb.HExists(ctx, l.Queues(sh), "audit").Val() {
			missing = append(missing, sh)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("BUG: queue audit, registered by a scheduler during the resize, is missing in shards %v for good", missing)
	}
}

// Finding: BeginResize takes "from" from the caller's configured count
// when there is no record yet. An operator whose config says 16 on a
// deployment that runs 32 starts "16 -> 8": shards 16..31 are outside the
// span, lose their owners and are never migrated. The markers written by
// RegisterQueues ("0|32|0") say the real count, but are not consulted.
func TestReviewFirstResizeTrustsTheCallersShardCount(t *testing.T) {
	s, rdb := newSizedStore(t, 32)
	ctx := testenv.Ctx(t, 30*time.Second)
	var id string
	for i := 0; ; i++ {
		if id = "far-" + string(rune('a'+i%26)) + time.Now().Format("150405.000000000"); shardOfN(id, 32) >= 16 {
			break
		}
	}
	if r := s.Enqueue(ctx, EnqueueArgs{ID: id, Queue: "default", Delay: time.Hour, MaxRetries: -1}); r.Err != nil {
		t.Fatal(r.Err)
	}
	cfg16, _ := NewLayout("rs", 16)
	cli := NewStore(rdb, cfg16) // the operator's CLI, configured with 16
	l, err := cli.BeginResize(ctx, 8)
	if err != nil {
		t.Fatalf("BeginResize: %v", err)
	}
	if sh := shardOfN(id, 32); sh >= l.Span() {
		t.Fatalf("BUG: the change runs %d -> %d (span %d) but %s lives in shard %d: no owner, no migration", l.From(), l.Shards(), l.Span(), id, sh)
	}
}

// Finding: overlap skip checks for the schedule's last task in the home
// shard only (fire.lua: HEXISTS on KEYS[2]). The last occurrence's id was
// placed by the old count; when the change moves that task (it is
// scheduled at least a second ahead: a retry in backoff, a jittered due
// time), the next occurrence fires although the previous task is still
// stored: the overlap policy is broken across a change.
func TestReviewOverlapSkipLosesTrackOfAMovedTask(t *testing.T) {
	s, rdb := newSizedStore(t, 4)
	ctx := testenv.Ctx(t, 30*time.Second)
	var name string
	for i := 0; ; i++ {
		name = "ov" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		if shardOfN(name, 8) < 4 {
			break
		}
	}
	l4 := s.Layout()
	h := l4.HomeShard(name)
	occ1 := time.Now().Truncate(time.Second)
	for l4.ShardOf(l4.OccurrenceID(name, occ1)) == shardOfN(l4.OccurrenceID(name, occ1), 8) {
		occ1 = occ1.Add(time.Second)
	}
	id1 := l4.OccurrenceID(name, occ1)
	fire := func(occ time.Time) FireResult {
		t.Helper()
		l := s.Layout()
		r, err := s.Fire(ctx, h, FireArgs{Schedule: name, Occurrence: occ, Epoch: rsEpoch, Overlap: true,
			Task: EnqueueArgs{ID: l.OccurrenceID(name, occ), Queue: "default", Due: occ.Add(time.Hour), MaxRetries: -1}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := fire(occ1); r.Outcome != Fired {
		t.Fatalf("first occurrence: %+v", r)
	}
	l, err := s.BeginResize(ctx, 8)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Export(ctx, s.Layout(), h, rsEpoch, time.Second, []string{id1})
	if err != nil || len(r.Tasks) != 1 {
		t.Fatalf("export: %+v %v", r, err)
	}
	importAll(t, ctx, s, l, r.Tasks)
	if _, err := s.Commit(ctx, h, rsEpoch, []string{id1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lookup(ctx, id1); err != nil {
		t.Fatalf("previous task: %v", err)
	}
	if r := fire(occ1.Add(time.Minute)); r.Outcome != SkippedOverlap {
		t.Fatalf("BUG: next occurrence %v while the previous task %s is still stored (moved to shard %d): overlap skip not applied", r.Outcome, id1, l.ShardOf(id1))
	}
	_ = rdb
}

// Finding: a resize that dies after writing the markers and before
// "start" leaves the record "preparing". Producers are redirected by the
// markers and store tasks in the new shards (acknowledged), while every
// scheduler and worker follows the record's layout for "preparing": the
// old count, so nobody owns or pops the new shards until an operator
// notices and runs the resize again.
func TestReviewCrashInPreparingStrandsAckedTasks(t *testing.T) {
	s, rdb := newSizedStore(t, 4)
	ctx := testenv.Ctx(t, 30*time.Second)
	// BeginResize(8) up to its markers, then the process dies.
	h := &afterHook{match: func(a []any) bool {
		n, _ := a[0].(string)
		k, _ := a[1].(string)
		return n == "set" && k == s.k.Marker(7)
	}, fn: func() { panic("operator's process dies") }}
	op := NewStore(hooked(t, rdb, h), *s.base)
	func() {
		defer func() { _ = recover() }()
		_, _ = op.BeginResize(ctx, 8)
	}()
	producer := NewStore(rdb, *s.base) // on the old layout
	var id string
	for i := 0; ; i++ {
		if id = "p" + string(rune('a'+i%26)) + string(rune('a'+i/26)); shardOfN(id, 8) >= 4 {
			break
		}
	}
	r := producer.Enqueue(ctx, EnqueueArgs{ID: id, Queue: "default", Delay: time.Second, MaxRetries: -1})
	sched := NewStore(rdb, *s.base)
	sl, err := sched.RefreshLayout(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r.Err == nil && shardOfN(id, 8) >= sl.Span() {
		t.Fatalf("BUG: %s was acknowledged into shard %d, but schedulers/workers run span %d (record preparing): nobody owns, moves or pops it", id, shardOfN(id, 8), sl.Span())
	}
}
