package shard

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// Slot migrations (docs/protocol.md, "Slot migrations"). While a shard's
// slot moves between two nodes of a Redis Cluster its keys are split
// between them. Redis checks a script's declared keys before it runs it,
// but an undeclared key (a ready list, a pending set or a far-tier bucket
// list, named from ARGV prefixes and data) only when a command touches
// it: on the migrating node a key already moved fails that command in the
// middle of the script, after its earlier writes, and on the importing
// node (reached through ASK) a key not moved yet reads as empty and a
// write creates a second copy. TestScriptsDuringSlotMigration puts one
// shard per case into such a half-migrated state by hand and runs one
// script through its Go caller.

// migEpoch is the fencing epoch of the seeded shards' owner.
const migEpoch = 5

// Key sets of the cases, as suffixes of the shard's tag ("{ns:s}:").
// farBucket and farSoon stand for the far-tier bucket lists the seeding
// creates, whose names follow from due times.
const (
	farBucket = "far:BUCKET"
	farSoon   = "far:SOON"
)

var (
	migLists       = []string{"ready:q1", "ready:q2", "pending:q1", "pending:q2"}
	moveKeys       = []string{"delayed", "tasks", "epoch", "dead", "dead:info", "stats", "seq", "readyqueues", "far", "counts"}
	ackKeys        = []string{"tasks", "inflight", "leases", "errors", "counts"}
	recoverKeys    = []string{"delayed", "tasks", "inflight", "leases", "errors", "dead", "dead:info", "queues", "epoch", "stats", "readyqueues", "counts"}
	cancelKeys     = []string{"delayed", "tasks", "inflight", "dead", "dead:info", "errors", "counts"}
	enqueueKeys    = []string{"delayed", "tasks", "queues", "far", "counts"}
	lookupKeys     = []string{"delayed", "tasks", "inflight", "dead", "dead:info", "errors"}
	migSeededKeys  = []string{"delayed", "far", farBucket, "tasks", "ready:q1", "ready:q2", "pending:q1", "pending:q2", "readyqueues", "seq", "inflight", "leases", "errors", "dead", "dead:info", "epoch", "queues", "stats", "counts", "periodic"}
	migRolesQueue1 = []string{"u1", "l1", "x1", "r1", "k1", "w1"}
	migRolesQueue2 = []string{"u2", "w2"}
)

// migSeed varies the seeded state.
type migSeed struct {
	oneDue  bool // only d1 is due (move.lua's one-task path), not d1 and d2
	farSoon bool // a far-tier bucket ("fs", list farSoon) is due for promotion
}

// migFixture is one seeded shard of the cluster and the two nodes between
// which its slot moves. Tasks are named by role:
//
//	u1, u2  popped from ready:q1 / ready:q2, run without a lease
//	l1      leased (the task's 30 s timeout)
//	x1      leased for 1 ms: an expired lease for recovery
//	r1      failed once, retried in an hour (delayed, with a last error)
//	k1      dead (not retryable)
//	w1, w2  waiting in ready:q1 / ready:q2
//	far1    in the far tier, an hour ahead (list farBucket)
//	fs      in the far tier, its bucket due (list farSoon; seed.farSoon)
//	d1, d2  due now in the delayed set (d2 unless seed.oneDue)
//	n1      not stored: an id for the enqueue cases
type migFixture struct {
	s        *Store
	cc       *redis.ClusterClient
	rc       *testenv.RedisCluster
	sh, slot int
	src, dst *testenv.ClusterNode
	others   []*testenv.ClusterNode
	nodes    map[*testenv.ClusterNode]*redis.Client

	id      map[string]string   // role -> task id
	d       map[string]Delivery // popped and leased deliveries by role
	buckets map[string]string   // farBucket, farSoon -> bucket start
	farDue  time.Time           // far1's due time
	stored  map[string]bool     // ids that must be stored at the end
}

// key returns the full name of a key suffix of the shard.
func (f *migFixture) key(suffix string) string {
	if b, ok := f.buckets[suffix]; ok {
		return f.s.Layout().FarBucket(f.sh, b)
	}
	return f.s.Layout().Tag(f.sh) + ":" + suffix
}

type migCase struct {
	name  string
	seed  migSeed
	moved []string // keys migrated before the call (suffixes)
	call  func(ctx context.Context, f *migFixture) error
	// want is "ok" (the call completes, and call checked its result) or
	// "TRYAGAIN" (a retryable error, nothing written on either node).
	want string
	// removes and adds name the tasks a successful call deletes or stores.
	removes, adds []string
}

func TestScriptsDuringSlotMigration(t *testing.T) {
	t.Parallel()
	rc := testenv.StartRedisCluster(t, 3, 0)
	cc := rc.Client(t)
	l, err := NewLayout("mig", 64)
	if err != nil {
		t.Fatal(err)
	}
	s := NewStore(cc, l)
	ctx := testenv.Ctx(t, 3*time.Minute)
	if err := s.RegisterQueues(ctx, map[string]QueuePolicy{
		"q1": {MaxRetries: 3, Timeout: 30 * time.Second, MaxPayload: 1024},
		"q2": {MaxRetries: 3, Timeout: 30 * time.Second, MaxPayload: 1024},
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetFarTier(ctx, FarTier{Bucket: time.Second, Lead: time.Second}); err != nil {
		t.Fatal(err)
	}
	primaries := rc.Primaries()
	nodes := map[*testenv.ClusterNode]*redis.Client{}
	for _, p := range primaries {
		nodes[p] = p.Client(t)
	}

	move := func(ctx context.Context, f *migFixture) error {
		_, err := f.s.Move(ctx, f.sh, migEpoch, 100)
		return err
	}
	ack := func(roles ...string) func(context.Context, *migFixture) error {
		return func(ctx context.Context, f *migFixture) error {
			var args []AckArgs
			for _, r := range roles {
				d := f.d[r]
				args = append(args, d.AckArgs(d.Unleased))
			}
			return errors.Join(f.s.AckBatch(ctx, args)...)
		}
	}
	claimU1 := func(ctx context.Context, f *migFixture) error {
		ds, err := f.s.Claim(ctx, f.sh, "q1", []string{f.d["u1"].Ref()}, 0)
		if err == nil && len(ds) != 1 {
			return fmt.Errorf("claim leased %d deliveries, want 1", len(ds))
		}
		return err
	}
	recoverPass := func(ctx context.Context, f *migFixture) error {
		_, err := f.s.Recover(ctx, f.sh, migEpoch, RecoverArgs{Limit: 100})
		return err
	}
	cancel := func(role, want string) func(context.Context, *migFixture) error {
		return func(ctx context.Context, f *migFixture) error {
			state, err := f.s.Cancel(ctx, f.id[role])
			if err == nil && state != want {
				return fmt.Errorf("cancel of %s reported %q, want %q", role, state, want)
			}
			return err
		}
	}
	replayK1 := func(ctx context.Context, f *migFixture) error {
		return f.s.DeadOne(ctx, Replay, f.id["k1"], time.Time{})
	}
	enqueueN1 := func(ctx context.Context, f *migFixture) error {
		return f.s.Enqueue(ctx, EnqueueArgs{ID: f.id["n1"], Queue: "q1", Due: f.farDue, MaxRetries: -1}).Err
	}
	// fireFar fires an occurrence of a schedule homed in the shard whose
	// task goes to the far bucket: fire.lua must record the occurrence
	// only once its enqueue succeeded.
	fireFar := func(ctx context.Context, f *migFixture) error {
		l := f.s.Layout()
		name := ""
		for i := 0; name == ""; i++ {
			if n := fmt.Sprintf("sched-%d", i); l.HomeShard(n) == f.sh {
				name = n
			}
		}
		f.id["fired"] = l.OccurrenceID(name, f.farDue)
		r, err := f.s.Fire(ctx, f.sh, FireArgs{Schedule: name, Occurrence: f.farDue, Epoch: migEpoch,
			Task: EnqueueArgs{ID: f.id["fired"], Queue: "q1", Due: f.farDue, MaxRetries: -1}})
		if err == nil && r.Outcome != Fired {
			return fmt.Errorf("fire: outcome %v, want fired", r.Outcome)
		}
		return err
	}
	lookupW1 := func(ctx context.Context, f *migFixture) error {
		info, err := f.s.Lookup(ctx, f.id["w1"])
		if err == nil && info.State != "ready" {
			return fmt.Errorf("lookup of w1 reported %q, want ready", info.State)
		}
		return err
	}
	depth := func(ctx context.Context, f *migFixture) error {
		ds, err := f.s.Depth(ctx, []int{f.sh})
		if err != nil {
			return err
		}
		for _, d := range ds[0] {
			if d.Queue == "q1" && (d.Ready != 1 || d.Popped != 1) {
				return fmt.Errorf("depth of q1: %d ready, %d popped; want 1 and 1", d.Ready, d.Popped)
			}
		}
		return nil
	}
	pageFar := func(ctx context.Context, f *migFixture) error {
		es, _, _, err := f.s.PageFar(ctx, f.sh, FarCursor{}, 100, "")
		if err == nil && (len(es) != 1 || es[0].ID != f.id["far1"]) {
			return fmt.Errorf("far-tier page %+v, want far1 alone", es)
		}
		return err
	}

	cases := []migCase{
		// move.lua: ready lists, pending sets and due far-tier buckets.
		{name: "move/ready lists moved", moved: []string{"ready:q1", "ready:q2"}, call: move, want: "TRYAGAIN"},
		{name: "move/pending sets moved", moved: []string{"pending:q1", "pending:q2"}, call: move, want: "TRYAGAIN"},
		{name: "move/one due task, its ready list moved", seed: migSeed{oneDue: true}, moved: []string{"ready:q1"}, call: move, want: "TRYAGAIN"},
		{name: "move/declared keys moved, lists not", moved: moveKeys, call: move, want: "TRYAGAIN"},
		{name: "move/due far bucket moved", seed: migSeed{farSoon: true}, moved: []string{farSoon}, call: move, want: "TRYAGAIN"},
		{name: "move/all but the due far bucket moved", seed: migSeed{farSoon: true}, moved: append(slices.Clone(moveKeys), migLists...), call: move, want: "TRYAGAIN"},
		{name: "move/other far bucket moved", moved: []string{farBucket}, call: move, want: "ok"},
		// ack.lua: the pending sets of deliveries run without a lease.
		{name: "ack/two queues, one pending set moved", moved: []string{"pending:q2"}, call: ack("u1", "u2"), want: "TRYAGAIN", removes: []string{"u1", "u2"}},
		{name: "ack/declared keys moved, pending set not", moved: ackKeys, call: ack("u1"), want: "TRYAGAIN", removes: []string{"u1"}},
		{name: "ack/leased delivery, lists moved", moved: migLists, call: ack("l1"), want: "ok", removes: []string{"l1"}},
		// nack, release and claim declare every key: Redis checks them.
		{name: "nack/pending set moved", moved: []string{"pending:q1"}, call: func(ctx context.Context, f *migFixture) error {
			_, err := f.s.Nack(ctx, f.d["u1"].NackArgs(true, "boom"))
			return err
		}, want: "TRYAGAIN"},
		{name: "release/ready list moved", moved: []string{"ready:q1"}, call: func(ctx context.Context, f *migFixture) error {
			return f.s.Release(ctx, f.d["l1"])
		}, want: "TRYAGAIN"},
		{name: "claim/pending set moved", moved: []string{"pending:q1"}, call: claimU1, want: "TRYAGAIN"},
		{name: "claim/ready list moved", moved: []string{"ready:q1"}, call: claimU1, want: "ok"},
		// recover.lua: every ready queue's lists, after an expired lease.
		{name: "recover/one queue's lists moved", moved: []string{"ready:q2", "pending:q2"}, call: recoverPass, want: "TRYAGAIN"},
		{name: "recover/declared keys moved, lists not", moved: recoverKeys, call: recoverPass, want: "TRYAGAIN"},
		// cancel.lua: a ready task's lists.
		{name: "cancel/ready task, its ready list moved", moved: []string{"ready:q1"}, call: cancel("w1", "ready"), want: "TRYAGAIN", removes: []string{"w1"}},
		{name: "cancel/declared keys moved, lists not", moved: cancelKeys, call: cancel("w1", "ready"), want: "TRYAGAIN", removes: []string{"w1"}},
		{name: "cancel/scheduled task, lists moved", moved: migLists, call: cancel("d1", "scheduled"), want: "ok", removes: []string{"d1"}},
		// deadops.lua declares every key.
		{name: "replay/delayed set moved", moved: []string{"delayed"}, call: replayK1, want: "TRYAGAIN"},
		{name: "replay/lists moved", moved: migLists, call: replayK1, want: "ok"},
		// enqueue.lua: far-tier bucket lists.
		{name: "enqueue/far bucket moved", moved: []string{farBucket}, call: enqueueN1, want: "TRYAGAIN", adds: []string{"n1"}},
		{name: "enqueue/declared keys moved, far bucket not", moved: enqueueKeys, call: enqueueN1, want: "TRYAGAIN", adds: []string{"n1"}},
		{name: "fire/far bucket moved", moved: []string{farBucket}, call: fireFar, want: "TRYAGAIN", adds: []string{"fired"}},
		// Read-only scripts: no partial writes, but a wrong answer or an
		// error that is not retryable.
		{name: "lookup/pending set moved", moved: []string{"pending:q1"}, call: lookupW1, want: "TRYAGAIN"},
		{name: "lookup/declared keys moved, lists not", moved: lookupKeys, call: lookupW1, want: "TRYAGAIN"},
		{name: "depth/ready list moved", moved: []string{"ready:q1"}, call: depth, want: "TRYAGAIN"},
		{name: "pagefar/bucket moved", moved: []string{farBucket}, call: pageFar, want: "TRYAGAIN"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := testenv.Ctx(t, time.Minute)
			sh := i
			f := &migFixture{s: s, cc: cc, rc: rc, sh: sh, slot: testenv.KeySlot(l.Tag(sh)), nodes: nodes}
			f.src = rc.NodeForSlot(f.slot)
			for _, p := range primaries {
				switch {
				case p == f.src:
				case f.dst == nil:
					f.dst = p
				default:
					f.others = append(f.others, p)
				}
			}
			f.seed(t, ctx, c.seed)
			f.runCase(t, ctx, c)
		})
	}
}

// runCase migrates c.moved, runs c.call, checks its outcome, finishes the
// migration, runs c.call again if it was refused, and checks that no task
// was lost.
func (f *migFixture) runCase(t *testing.T, ctx context.Context, c migCase) {
	f.beginMigration(t, ctx)
	var moved []string
	for _, k := range c.moved {
		moved = append(moved, f.key(k))
	}
	if err := f.migrate(ctx, false, moved...); err != nil {
		t.Fatalf("MIGRATE %v: %v", moved, err)
	}
	before := f.snapshot(t, ctx)
	err := c.call(ctx, f)
	after := f.snapshot(t, ctx)
	changed := snapshotDiff(before, after)
	switch {
	case c.want == "ok" && err != nil:
		t.Errorf("during the migration: %v, want success", err)
	case c.want == "TRYAGAIN" && err == nil:
		t.Errorf("during the migration: success (changed: %v), want a TRYAGAIN error", changed)
	case c.want == "TRYAGAIN" && !redis.HasErrorPrefix(err, "TRYAGAIN"):
		t.Errorf("during the migration: %v, want a TRYAGAIN error (changed: %v)", err, changed)
	case c.want == "TRYAGAIN" && len(changed) > 0:
		t.Errorf("during the migration: %v, but it wrote %v", err, changed)
	}
	if err == nil {
		f.applied(c)
	}

	f.finishMigration(t, ctx)
	if err != nil {
		if err := c.call(ctx, f); err != nil {
			t.Errorf("after the migration: %v, want success", err)
		} else {
			f.applied(c)
		}
	}
	f.checkNoneLost(t, ctx)
}

// applied records what a successful call of c stored and deleted.
func (f *migFixture) applied(c migCase) {
	for _, r := range c.removes {
		delete(f.stored, f.id[r])
	}
	for _, r := range c.adds {
		f.stored[f.id[r]] = true
	}
}

// seed puts tasks of every role into the shard, so that every key of the
// shard exists (Redis runs a script during a migration only if all its
// declared keys are on the node).
func (f *migFixture) seed(t *testing.T, ctx context.Context, o migSeed) {
	t.Helper()
	s, l, sh := f.s, f.s.Layout(), f.sh
	f.id, f.d, f.buckets, f.stored = map[string]string{}, map[string]Delivery{}, map[string]string{}, map[string]bool{}
	roles := append(append(slices.Clone(migRolesQueue1), migRolesQueue2...), "far1", "fs", "d1", "d2", "n1")
	for i, id := range shardIDs(l, sh, fmt.Sprintf("mig%d-", sh), len(roles)) {
		f.id[roles[i]] = id
	}
	enqueue := func(role string, a EnqueueArgs) {
		t.Helper()
		a.ID, a.MaxRetries = f.id[role], -1
		if r := s.Enqueue(ctx, a); r.Err != nil {
			t.Fatalf("enqueue %s: %v", role, r.Err)
		}
		f.stored[a.ID] = true
	}
	// One at a time, so that each list holds its tasks in role order.
	for _, q := range []struct {
		name  string
		roles []string
	}{{"q1", migRolesQueue1}, {"q2", migRolesQueue2}} {
		for _, r := range q.roles {
			enqueue(r, EnqueueArgs{Queue: q.name})
			if res, err := s.Move(ctx, sh, migEpoch, 100); err != nil || res.Moved != 1 {
				t.Fatalf("move %s: %+v, %v", r, res, err)
			}
		}
	}
	pop := func(q string, roles ...string) {
		t.Helper()
		entries, err := f.cc.LPopCount(ctx, l.Ready(sh, q), len(roles)).Result()
		if err != nil || len(entries) != len(roles) {
			t.Fatalf("pop %v: %v, %v", roles, entries, err)
		}
		for i, e := range entries {
			d, ok := f.s.Popped(sh, e, time.Now(), 0)
			if !ok || d.Task.ID != f.id[roles[i]] {
				t.Fatalf("popped %q, want %s", e, roles[i])
			}
			f.d[roles[i]] = d
		}
	}
	pop("q1", "u1", "l1", "x1", "r1", "k1")
	pop("q2", "u2")
	for _, c := range []struct {
		role  string
		lease time.Duration
	}{{"l1", 0}, {"x1", time.Millisecond}, {"r1", 0}, {"k1", 0}} {
		ds, err := s.Claim(ctx, sh, "q1", []string{f.d[c.role].Ref()}, c.lease)
		if err != nil || len(ds) != 1 {
			t.Fatalf("claim %s: %v, %v", c.role, ds, err)
		}
		f.d[c.role] = ds[0]
	}
	retry := f.d["r1"].NackArgs(false, "boom")
	retry.RetryAfter = time.Hour
	dead := f.d["k1"].NackArgs(false, "fatal")
	dead.Dead = true
	for _, a := range []NackArgs{retry, dead} {
		if _, err := s.Nack(ctx, a); err != nil {
			t.Fatalf("nack %s: %v", a.ID, err)
		}
	}
	if _, err := s.Move(ctx, sh, migEpoch-1, 1); !errors.Is(err, ErrStaleEpoch) { // counted in :stats
		t.Fatalf("stale move: %v", err)
	}
	now, err := f.cc.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	f.farDue = now.Add(time.Hour).Truncate(time.Millisecond)
	enqueue("far1", EnqueueArgs{Queue: "q1", Due: f.farDue})
	f.buckets[farBucket] = strconv.FormatInt(f.farDue.UnixMilli()-f.farDue.UnixMilli()%1000, 10)
	if o.farSoon {
		// Its 1 s bucket starts 1.5 to 2.5 s ahead, so it goes to the far
		// tier; its promotion, 1 s before the bucket starts, is then
		// awaited.
		due := now.Add(2500 * time.Millisecond).UnixMilli()
		enqueue("fs", EnqueueArgs{Queue: "q2", Due: time.UnixMilli(due)})
		bucket := due - due%1000
		f.buckets[farSoon] = strconv.FormatInt(bucket, 10)
		time.Sleep(time.Until(time.UnixMilli(bucket - 1000 + 20)))
	}
	enqueue("d1", EnqueueArgs{Queue: "q1"})
	if !o.oneDue {
		enqueue("d2", EnqueueArgs{Queue: "q2"})
	}
	// A schedule's state, as a shard with periodic schedules has: a
	// fire that records before its enqueue failed would change it.
	if err := f.cc.HSet(ctx, f.key("periodic"), "seeded", 1).Err(); err != nil {
		t.Fatal(err)
	}
	keys := slices.Clone(migSeededKeys)
	if o.farSoon {
		keys = append(keys, farSoon)
	}
	for _, k := range keys {
		if n, err := f.cc.Exists(ctx, f.key(k)).Result(); err != nil || n != 1 {
			t.Fatalf("seeded shard lacks %s: %d, %v", f.key(k), n, err)
		}
	}
}

// beginMigration marks the slot IMPORTING on the target, then MIGRATING
// on the source, as redis-cli --cluster reshard does.
func (f *migFixture) beginMigration(t *testing.T, ctx context.Context) {
	t.Helper()
	if err := f.nodes[f.dst].Do(ctx, "CLUSTER", "SETSLOT", f.slot, "IMPORTING", f.src.ID).Err(); err != nil {
		t.Fatal(err)
	}
	if err := f.nodes[f.src].Do(ctx, "CLUSTER", "SETSLOT", f.slot, "MIGRATING", f.dst.ID).Err(); err != nil {
		t.Fatal(err)
	}
}

// migrate moves keys from the source to the target with MIGRATE, which
// without replace refuses a key the target already has (BUSYKEY); the
// cluster's MIGRATEs go one at a time (testenv's Migrate).
func (f *migFixture) migrate(ctx context.Context, replace bool, keys ...string) error {
	return f.rc.Migrate(ctx, f.src, f.dst, replace, keys...)
}

// finishMigration moves the slot's remaining keys and assigns the slot
// to the target on every primary (target first, then source). A key the
// target has already makes it an error: a script created it there while
// the source still held it, and only MIGRATE ... REPLACE (which drops
// the target's copy) can finish then.
func (f *migFixture) finishMigration(t *testing.T, ctx context.Context) {
	t.Helper()
	src := f.nodes[f.src]
	keys, err := src.ClusterGetKeysInSlot(ctx, f.slot, 10000).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.migrate(ctx, false, keys...); err != nil {
		t.Errorf("MIGRATE of the remaining keys %v: %v: a call created on the importing node a key the migrating node still held", keys, err)
		if err := f.migrate(ctx, true, keys...); err != nil {
			t.Fatalf("MIGRATE REPLACE: %v", err)
		}
	}
	for _, n := range append([]*testenv.ClusterNode{f.dst, f.src}, f.others...) {
		if err := f.nodes[n].Do(ctx, "CLUSTER", "SETSLOT", f.slot, "NODE", f.dst.ID).Err(); err != nil {
			t.Fatalf("SETSLOT NODE on %s: %v", n.Addr, err)
		}
	}
	if err := f.rc.WaitSlotOwner(ctx, f.slot, f.dst); err != nil {
		t.Fatal(err)
	}
}

// snapshot returns the DUMP of every key of the slot on the source and
// the target, by "node key". ASKING lets the target answer for its
// importing slot.
func (f *migFixture) snapshot(t *testing.T, ctx context.Context) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range []*testenv.ClusterNode{f.src, f.dst} {
		c := f.nodes[n]
		keys, err := c.ClusterGetKeysInSlot(ctx, f.slot, 10000).Result()
		if err != nil {
			t.Fatal(err)
		}
		pipe := c.Pipeline()
		dumps := make([]*redis.StringCmd, len(keys))
		for i, k := range keys {
			pipe.Do(ctx, "ASKING")
			dumps[i] = pipe.Dump(ctx, k)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatalf("DUMP on %s: %v", n.Addr, err)
		}
		for i, k := range keys {
			out[n.Addr+" "+k] = dumps[i].Val()
		}
	}
	return out
}

// snapshotDiff lists the keys created, changed or deleted between two
// snapshots.
func snapshotDiff(before, after map[string]string) []string {
	var out []string
	for k, v := range after {
		if w, ok := before[k]; !ok {
			out = append(out, "created "+k)
		} else if v != w {
			out = append(out, "changed "+k)
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			out = append(out, "deleted "+k)
		}
	}
	slices.Sort(out)
	return out
}

// checkNoneLost checks, after the migration, that the shard stores
// exactly the tasks it should, each in exactly one place a worker or the
// mover will find it: the delayed set, the in-flight set, the dead-letter
// set, its queue's pending set, or a far-tier bucket list that the far
// set names.
func (f *migFixture) checkNoneLost(t *testing.T, ctx context.Context) {
	t.Helper()
	blobs, err := f.cc.HGetAll(ctx, f.key("tasks")).Result()
	if err != nil {
		t.Fatal(err)
	}
	for id := range f.stored {
		if _, ok := blobs[id]; !ok {
			t.Errorf("task %s lost: no data", id)
		}
	}
	for id := range blobs {
		if !f.stored[id] {
			t.Errorf("task %s stored, want it gone", id)
		}
	}
	buckets, err := f.cc.ZRange(ctx, f.key("far"), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	inBucket := map[string]string{}
	for _, b := range buckets {
		entries, err := f.cc.LRange(ctx, f.s.Layout().FarBucket(f.sh, b), 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			id, _, _ := strings.Cut(e, "|")
			inBucket[id] = b
		}
	}
	for _, b := range slices.Sorted(maps.Values(f.buckets)) {
		k := f.s.Layout().FarBucket(f.sh, b)
		if n, _ := f.cc.Exists(ctx, k).Result(); n == 1 && !slices.Contains(buckets, b) {
			t.Errorf("bucket list %s is not in the far set: its tasks are never promoted", k)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(blobs)) {
		var places []string
		for _, set := range []string{"delayed", "inflight", "dead"} {
			if _, err := f.cc.ZScore(ctx, f.key(set), id).Result(); err == nil {
				places = append(places, set)
			}
		}
		if q := blobQueue(f.s, blobs[id]); q != "" {
			if _, err := f.cc.ZScore(ctx, f.key("pending:"+q), id).Result(); err == nil {
				places = append(places, "pending:"+q)
			}
		}
		if b, ok := inBucket[id]; ok {
			places = append(places, "far:"+b)
		}
		if len(places) != 1 {
			t.Errorf("task %s is in %v, want exactly one place", id, places)
		}
	}
}

// blobQueue returns the queue of encoded task data.
func blobQueue(s *Store, blob string) string {
	if len(blob) >= v2Header && blob[0] == 2 {
		q, _ := s.namesIn(0)(binary.BigEndian.Uint16([]byte(blob[1:3])))
		return q
	}
	parts := strings.SplitN(blob, "|", 3)
	if len(parts) < 3 || parts[0] != "1" {
		return ""
	}
	return parts[1]
}
