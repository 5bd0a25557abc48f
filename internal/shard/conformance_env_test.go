package shard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// The conformance suite's environment (conformance_test.go has the
// cases): the servers shared by every case, a namespace per case, the
// states a case runs in, the seeded shard, and the properties checked
// after each case.

// Per-shard callers that EnqueueBatch, Cancel, Change and Lookup wrap with
// placement logic. The suite calls them at the shard level; a rename of
// the helpers is a change of these lines only.
func confEnqueueIn(ctx context.Context, s *Store, l Layout, as []EnqueueArgs) ([]EnqueueResult, bool) {
	out := make([]EnqueueResult, len(as))
	todo := make([]int, len(as))
	for i := range todo {
		todo[i] = i
	}
	redirected := s.enqueueOnce(ctx, l, as, todo, out)
	return out, len(redirected) > 0
}

func confCancelIn(ctx context.Context, s *Store, l Layout, sh int, id string) (string, error) {
	st, _, err := s.cancelIn(ctx, Place{Shard: sh, Outbox: l.Resharding()}, id)
	return st, err
}

func confChangeIn(ctx context.Context, s *Store, sh int, id string, c Change) (ChangeResult, error) {
	args, err := c.args()
	if err != nil {
		return ChangeResult{}, err
	}
	return s.changeIn(ctx, sh, id, args)
}

func confLookupIn(ctx context.Context, s *Store, l Layout, sh int, id string) (Info, error) {
	return s.lookupIn(ctx, Place{Shard: sh, Outbox: l.Resharding()}, id)
}

// The suite's layout: a namespace of confShards shards, which a change of
// the shard count grows to confGrown. Cases work on shard confShard,
// which both counts keep; ids whose shard changes move to confNewShard.
const (
	confShards   = 4
	confGrown    = 8
	confShard    = 1
	confNewShard = 5
	confEpoch    = 5 // the epoch of the shard's owner
	confOther    = 2 // another shard of both counts, seeded with nothing
)

// confState is a state the scripts' contract must hold in.
type confState string

const (
	// stStable: no change of the shard count, no slot migration.
	stStable confState = "stable"
	// stSlotMigrating: (Redis Cluster) the shard's slot is moving between
	// nodes, some of its keys moved already (ASK, TRYAGAIN).
	stSlotMigrating confState = "slot migrating"
	// stSealed: a change of the shard count is being set up: every marker
	// is "gen|0|0", the record "preparing".
	stSealed confState = "sealed"
	// stRedirecting: the markers name the new count, the record is still
	// "preparing": producers on the old generation are redirected.
	stRedirecting confState = "redirecting"
	// stResharding: the change runs (record "resharding"): owners export,
	// import and commit; outbox and cancelled entries exist.
	stResharding confState = "resharding"
)

// confProp is a property a case checks.
type confProp string

const (
	pBehaviour confProp = "B" // the documented reply and effect
	pFence     confProp = "F" // fencing by epoch: a stale owner writes nothing but the counter
	pTryAgain  confProp = "T" // TRYAGAIN with nothing written (retry succeeds)
	pLayout    confProp = "L" // LAYOUT redirect / stale marker refused, nothing written
	pOutbox    confProp = "O" // outbox and cancelled entries
	pCounts    confProp = "C" // the counts hash equals what the shard holds
)

// confTopology is one deployment the suite runs against, shared by all
// its cases. Each case takes a namespace of its own (on a cluster, one
// whose slots no other case uses, so a case can move its slot).
type confTopology struct {
	name    string
	rdb     redis.UniversalClient
	cluster bool
	// encoding is the task encoding the cases' namespaces register:
	// Sentinel's run version 1, the others version 2, so that the cases
	// check the scripts on both.
	encoding TaskEncoding

	mu      sync.Mutex
	next    int
	slots   map[int]bool                           // slots taken by a namespace (cluster)
	owner   map[int]*testenv.ClusterNode           // slot -> primary serving it (cluster)
	rc      *testenv.RedisCluster                  // the cluster (cluster)
	nodes   []*testenv.ClusterNode                 // primaries (cluster)
	clients map[*testenv.ClusterNode]*redis.Client // a client of each primary (cluster)
}

func startStandalone(t *testing.T) *confTopology {
	return &confTopology{name: "standalone", rdb: testenv.StartRedis(t).Client(t)}
}

func startSentinel(t *testing.T) *confTopology {
	return &confTopology{name: "sentinel", rdb: testenv.StartSentinel(t).FailoverClient(t), encoding: EncodingText}
}

func startCluster(t *testing.T) *confTopology {
	rc := testenv.StartRedisCluster(t, 3, 0)
	tp := &confTopology{name: "cluster", rdb: rc.Client(t), cluster: true, rc: rc,
		slots: map[int]bool{}, owner: map[int]*testenv.ClusterNode{}, clients: map[*testenv.ClusterNode]*redis.Client{}}
	tp.nodes = rc.Primaries()
	for _, n := range tp.nodes {
		tp.clients[n] = n.Client(t)
		for _, s := range rc.SlotsOf(n) {
			tp.owner[s] = n
		}
	}
	return tp
}

// namespace returns a namespace no other case uses: on a cluster, one
// whose shards' slots (and the record's) no other namespace has.
func (tp *confTopology) namespace(t *testing.T) string {
	t.Helper()
	tp.mu.Lock()
	defer tp.mu.Unlock()
	for {
		tp.next++
		ns := "c" + strconv.Itoa(tp.next)
		if !tp.cluster {
			return ns
		}
		slots := []int{testenv.KeySlot("{" + ns + "}")}
		for s := range confGrown {
			slots = append(slots, testenv.KeySlot("{"+ns+":"+strconv.Itoa(s)+"}"))
		}
		free := true
		seen := map[int]bool{}
		for _, s := range slots {
			free = free && !tp.slots[s] && !seen[s]
			seen[s] = true
		}
		if free {
			for _, s := range slots {
				tp.slots[s] = true
			}
			return ns
		}
	}
}

// confFixture is one case's namespace in one state: a shard confShard
// seeded with a task of every kind, then put into the state.
type confFixture struct {
	t     *testing.T
	ctx   context.Context
	top   *confTopology
	state confState
	rdb   redis.UniversalClient
	// s is the store the case calls: on the layout of the state (in
	// stResharding, the change's). old is a store still on generation 0,
	// a producer or owner that has not seen a change.
	s, old *Store
	l0     Layout // generation 0: confShards shards
	sh     int
	id     map[string]string   // role -> task id (seed)
	d      map[string]Delivery // role -> its delivery (popped, leased)
	farDue time.Time           // the far-tier task's due time
	called bool                // call ran (stSlotMigrating)
	next   int                 // calls of newIDs, for fresh ids
}

// Seeded roles, all in shard confShard of both counts, queue q1 unless
// said otherwise:
//
//	popped  popped from its ready list, run without a lease (d["popped"])
//	leased  leased for the task's timeout (d["leased"])
//	expired leased for 1 ms: an expired lease for recovery (d["expired"])
//	retry   failed once, retried in an hour (delayed, last error "boom")
//	dead    buried, not retryable (error "fatal")
//	ready   waiting in ready:q1
//	due     due now in the delayed set (not moved)
//	sched   queue q2, due in an hour (delayed set)
//	far     queue q2, due in two hours, in the far tier (bucket 1 min, lead 1 s)
var confRoles = []string{"popped", "leased", "expired", "retry", "dead", "ready", "due", "sched", "far"}

// newConfFixture makes a namespace, registers q1 and q2, seeds shard
// confShard, runs prepare (extra seeding, before the state), and puts
// the namespace into state.
func newConfFixture(t *testing.T, top *confTopology, state confState, prepare func(f *confFixture)) *confFixture {
	ns := top.namespace(t)
	l, err := NewLayout(ns, confShards)
	if err != nil {
		t.Fatal(err)
	}
	f := &confFixture{t: t, ctx: testenv.Ctx(t, time.Minute), top: top, state: state, rdb: top.rdb,
		l0: l, sh: confShard, id: map[string]string{}, d: map[string]Delivery{}}
	f.s = NewStore(top.rdb, l)
	f.s.SetTaskEncoding(top.encoding)
	if err := f.s.RegisterQueues(f.ctx, map[string]QueuePolicy{
		"q1": {MaxRetries: 3, Timeout: 30 * time.Second, MaxPayload: 1024},
		// q2 keeps records of its ended tasks (lib.lua's record_end).
		"q2": {MaxRetries: 3, Timeout: 30 * time.Second, MaxPayload: 1024, Retention: Retention{Age: time.Hour}},
	}); err != nil {
		t.Fatal(err)
	}
	f.seed()
	if prepare != nil {
		prepare(f)
	}
	f.old = NewStore(top.rdb, l)
	f.enter()
	t.Cleanup(f.finish)
	return f
}

// newIDs returns n fresh ids of shard confShard in both counts (or, with
// moving, of confShard among confShards and confNewShard among
// confGrown).
func (f *confFixture) newIDs(n int, moving bool) []string {
	want := confShard
	if moving {
		want = confNewShard
	}
	f.next++
	return testenv.IDs("t"+strconv.Itoa(f.next)+"-", n, func(id string) bool {
		return testenv.ShardOf(id, confShards) == confShard && testenv.ShardOf(id, confGrown) == want
	})
}

func (f *confFixture) enqueue(s *Store, queue string, due time.Time, ids ...string) {
	f.t.Helper()
	as := make([]EnqueueArgs, len(ids))
	for i, id := range ids {
		as[i] = EnqueueArgs{ID: id, Queue: queue, Due: due, MaxRetries: -1, Payload: []byte("p-" + id)}
	}
	for i, r := range s.EnqueueBatch(f.ctx, as) {
		if r.Err != nil {
			f.t.Fatalf("seed: enqueue %s: %v", ids[i], r.Err)
		}
	}
}

func (f *confFixture) now() time.Time {
	f.t.Helper()
	now, err := f.rdb.Time(f.ctx).Result()
	if err != nil {
		f.t.Fatal(err)
	}
	return now
}

// popOne enqueues id due now in q1, moves it (and any other due task)
// and pops its entry, the last one of the ready list (RPOP: entries
// seeded before it stay), as a worker would.
func (f *confFixture) popOne(id string) Delivery {
	f.t.Helper()
	f.enqueue(f.s, "q1", f.now().Add(-time.Second), id)
	if r, err := f.s.Move(f.ctx, f.sh, confEpoch, 100); err != nil || r.Moved < 1 {
		f.t.Fatalf("seed: move %s: %+v, %v", id, r, err)
	}
	e, err := f.rdb.RPop(f.ctx, f.l0.Ready(f.sh, "q1")).Result()
	if err != nil {
		f.t.Fatalf("seed: pop %s: %v", id, err)
	}
	d, ok := f.s.Popped(f.sh, e, time.Now(), 0)
	if !ok || d.Task.ID != id {
		f.t.Fatalf("seed: popped %q, want %s", e, id)
	}
	return d
}

// claimOne leases the popped delivery d for lease (0: the task's timeout).
func (f *confFixture) claimOne(d Delivery, lease time.Duration) Delivery {
	f.t.Helper()
	ds, err := f.s.Claim(f.ctx, f.sh, "q1", []string{d.Ref()}, lease)
	if err != nil || len(ds) != 1 {
		f.t.Fatalf("seed: claim %s: %v, %v", d.Task.ID, ds, err)
	}
	return ds[0]
}

// seed puts a task of every role into shard confShard, so that every
// key of the shard exists (a script runs during a slot migration only
// if all its declared keys are on the node), and one stale fenced call
// (the stats counter).
func (f *confFixture) seed() {
	f.t.Helper()
	for i, id := range f.newIDs(len(confRoles), false) {
		f.id[confRoles[i]] = id
	}
	f.d["popped"] = f.popOne(f.id["popped"])
	f.d["leased"] = f.claimOne(f.popOne(f.id["leased"]), 0)
	f.d["expired"] = f.claimOne(f.popOne(f.id["expired"]), time.Millisecond)
	for _, role := range []string{"retry", "dead"} {
		a := f.claimOne(f.popOne(f.id[role]), 0).NackArgs(false, map[string]string{"retry": "boom", "dead": "fatal"}[role])
		a.RetryAfter, a.Dead = time.Hour, role == "dead"
		if _, err := f.s.Nack(f.ctx, a); err != nil {
			f.t.Fatalf("seed: nack %s: %v", role, err)
		}
	}
	now := f.now()
	f.enqueue(f.s, "q1", now.Add(-time.Second), f.id["ready"])
	if r, err := f.s.Move(f.ctx, f.sh, confEpoch, 100); err != nil || r.Moved != 1 {
		f.t.Fatalf("seed: move ready: %+v, %v", r, err)
	}
	f.enqueue(f.s, "q1", now.Add(-time.Second), f.id["due"])
	f.enqueue(f.s, "q2", now.Add(time.Hour), f.id["sched"])
	if err := f.s.SetFarTier(f.ctx, FarTier{Bucket: time.Minute, Lead: time.Second}); err != nil {
		f.t.Fatal(err)
	}
	f.farDue = now.Add(2 * time.Hour).Truncate(time.Millisecond)
	f.enqueue(f.s, "q2", f.farDue, f.id["far"])
	if _, err := f.s.Move(f.ctx, f.sh, 1, 1); !errors.Is(err, ErrStaleEpoch) { // an owner long gone
		f.t.Fatalf("seed: stale move: %v", err)
	}
}

// farBucket is the far-tier bucket list of the "far" role.
func (f *confFixture) farBucket() string {
	ms := f.farDue.UnixMilli()
	return f.l0.FarBucket(f.sh, strconv.FormatInt(ms-ms%time.Minute.Milliseconds(), 10))
}

// key returns the full name of a key suffix of shard confShard ("far:"
// alone is the far role's bucket list).
func (f *confFixture) key(suffix string) string {
	if suffix == "far:" {
		return f.farBucket()
	}
	return f.l0.Tag(f.sh) + ":" + suffix
}

// enter puts the namespace into f.state (stSlotMigrating: see call).
func (f *confFixture) enter() {
	f.t.Helper()
	grown, err := f.l0.withChange(1, confGrown, confShards)
	if err != nil {
		f.t.Fatal(err)
	}
	switch f.state {
	case stSealed, stRedirecting:
		// What BeginResize does up to the markers (TestLayoutPreparing-
		// LeftByCrash shows a crash there is finished by a later call).
		if ok, _, _, err := f.s.layoutOp(f.ctx, "begin", 0, confGrown, confShards); err != nil || !ok {
			f.t.Fatalf("begin: %v, %v", ok, err)
		}
		if err := f.s.copyQueues(f.ctx, confShards, confGrown); err != nil {
			f.t.Fatal(err)
		}
		sealed := grown
		sealed.shards, sealed.from = 0, 0
		if err := f.s.writeMarkers(f.ctx, sealed, confGrown); err != nil {
			f.t.Fatal(err)
		}
		if f.state == stRedirecting {
			if err := f.s.writeMarkers(f.ctx, grown, confGrown); err != nil {
				f.t.Fatal(err)
			}
		}
	case stResharding:
		l, err := f.s.BeginResize(f.ctx, confGrown)
		if err != nil {
			f.t.Fatal(err)
		}
		if l.Gen() != 1 || l.Shards() != confGrown || l.From() != confShards {
			f.t.Fatalf("the change's layout: %+v", l)
		}
	}
}

// marker returns the value of shard sh's layout marker.
func (f *confFixture) marker(sh int) string {
	v, err := f.rdb.Get(f.ctx, f.l0.Marker(sh)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		f.t.Fatal(err)
	}
	return v
}

// call runs the script call fn. In stSlotMigrating it first marks the
// shard's slot migrating to another primary and moves the keys named by
// moved (suffixes, see key) there: the call must then fail with
// TRYAGAIN having written nothing on either node; the slot migration is
// finished and fn runs again. It returns fn's last error.
func (f *confFixture) call(moved []string, fn func() error) error {
	f.t.Helper()
	if f.state != stSlotMigrating {
		return fn()
	}
	f.called = true
	m := f.beginSlotMigration()
	var keys []string
	for _, k := range moved {
		keys = append(keys, f.key(k))
	}
	if err := m.migrate(f.ctx, false, keys...); err != nil {
		f.t.Fatalf("MIGRATE %v: %v", keys, err)
	}
	before := m.snapshot(f.t, f.ctx)
	err := fn()
	if changed := snapshotDiff(before, m.snapshot(f.t, f.ctx)); len(changed) > 0 {
		f.t.Errorf("[%s] during the slot migration (%v moved): %v, and it wrote %v", pTryAgain, moved, err, changed)
	}
	if !redis.HasErrorPrefix(err, "TRYAGAIN") {
		f.t.Errorf("[%s] during the slot migration (%v moved): %v, want a TRYAGAIN error", pTryAgain, moved, err)
	}
	f.finishSlotMigration(m)
	return fn()
}

// callAsk runs fn in stSlotMigrating once every key of the shard has
// moved to the target but the slot is still migrating: Redis answers the
// call with ASK, and fn (go-redis follows it with ASKING) must succeed
// on the target. The migration then finishes: a key the call created on
// the target while the source still held it fails the test (BUSYKEY).
// In other states it runs fn.
func (f *confFixture) callAsk(fn func() error) error {
	f.t.Helper()
	if f.state != stSlotMigrating {
		return fn()
	}
	f.called = true
	m := f.beginSlotMigration()
	keys, err := f.top.clients[m.src].ClusterGetKeysInSlot(f.ctx, m.slot, 10000).Result()
	if err != nil {
		f.t.Fatal(err)
	}
	if err := m.migrate(f.ctx, false, keys...); err != nil {
		f.t.Fatalf("MIGRATE: %v", err)
	}
	err = fn()
	f.finishSlotMigration(m)
	return err
}

// beginSlotMigration marks shard confShard's slot importing on another
// primary, then migrating on its own, with slotmigration_test.go's fixture
// (its migrate, finishMigration and snapshot move keys and read both
// nodes).
func (f *confFixture) beginSlotMigration() *migFixture {
	f.t.Helper()
	tp := f.top
	m := &migFixture{sh: f.sh, slot: testenv.KeySlot(f.l0.Tag(f.sh)), nodes: tp.clients, rc: tp.rc}
	tp.mu.Lock()
	m.src = tp.owner[m.slot]
	for _, n := range tp.nodes {
		switch {
		case n == m.src:
		case m.dst == nil:
			m.dst = n
		default:
			m.others = append(m.others, n)
		}
	}
	tp.mu.Unlock()
	m.beginMigration(f.t, f.ctx)
	return m
}

// finishSlotMigration moves the slot's other keys and gives it to the
// target (migFixture.finishMigration), and records its new owner.
func (f *confFixture) finishSlotMigration(m *migFixture) {
	f.t.Helper()
	m.finishMigration(f.t, f.ctx)
	f.top.mu.Lock()
	f.top.owner[m.slot] = m.dst
	f.top.mu.Unlock()
}

// keysOf lists the keys the namespace may have in shard sh (the far-tier
// bucket lists those its far set names).
func (f *confFixture) keysOf(sh int) []string {
	k := f.l0.Keys
	keys := []string{k.Delayed(sh), k.Far(sh), k.Tasks(sh), k.Queues(sh), k.Seq(sh), k.Inflight(sh), k.Leases(sh),
		k.Errors(sh), k.Dead(sh), k.DeadInfo(sh), k.Epoch(sh), k.Stats(sh), k.Periodic(sh), k.Marker(sh), k.Outbox(sh),
		k.Cancelled(sh), k.Imported(sh, 1), k.Counts(sh), k.ReadyQueues(sh)}
	for _, q := range []string{"q1", "q2"} {
		keys = append(keys, k.Ready(sh, q), k.Pending(sh, q))
	}
	buckets, err := f.rdb.ZRange(f.ctx, k.Far(sh), 0, -1).Result()
	if err != nil {
		f.t.Fatal(err)
	}
	for _, b := range buckets {
		keys = append(keys, k.FarBucket(sh, b))
	}
	return keys
}

// snapshot returns the DUMP of every key of the namespace, by name.
func (f *confFixture) snapshot() map[string]string {
	f.t.Helper()
	keys := []string{f.l0.Record(), f.l0.Paused()}
	for sh := range confGrown {
		keys = append(keys, f.keysOf(sh)...)
	}
	pipe := f.rdb.Pipeline()
	dumps := make([]*redis.StringCmd, len(keys))
	for i, k := range keys {
		dumps[i] = pipe.Dump(f.ctx, k)
	}
	if _, err := pipe.Exec(f.ctx); err != nil && !errors.Is(err, redis.Nil) {
		f.t.Fatal(err)
	}
	out := map[string]string{}
	for i, k := range keys {
		if v, err := dumps[i].Result(); err == nil {
			out[k] = v
		}
	}
	return out
}

// unchanged fails the test (property p) if the namespace differs from
// before other than in the keys allowed.
func (f *confFixture) unchanged(p confProp, what string, before map[string]string, allowed ...string) {
	f.t.Helper()
	var changed []string
	for _, d := range snapshotDiff(before, f.snapshot()) {
		if !slices.ContainsFunc(allowed, func(k string) bool { return strings.HasSuffix(d, " "+k) }) {
			changed = append(changed, d)
		}
	}
	if len(changed) > 0 {
		f.t.Errorf("[%s] %s wrote %v, want nothing written", p, what, changed)
	}
}

// fenced checks that call, made with an epoch older than the shard's
// owner's, fails with ErrStaleEpoch and writes nothing but the shard's
// stale_epoch counter, which it increments.
func (f *confFixture) fenced(what string, call func() error) {
	f.t.Helper()
	before := f.snapshot()
	n0, _ := f.s.StaleEpochRejections(f.ctx, f.sh)
	if err := call(); !errors.Is(err, ErrStaleEpoch) {
		f.t.Errorf("[%s] %s with a stale epoch: %v, want ErrStaleEpoch", pFence, what, err)
	}
	f.unchanged(pFence, what+" with a stale epoch", before, f.l0.Stats(f.sh))
	if n, _ := f.s.StaleEpochRejections(f.ctx, f.sh); n != n0+1 {
		f.t.Errorf("[%s] %s with a stale epoch: stale_epoch %d -> %d, want one more", pFence, what, n0, n)
	}
}

// finish checks, after the case, that every shard's counts hash is what
// the shard holds (pCounts).
func (f *confFixture) finish() {
	if f.t.Failed() {
		return
	}
	if f.state == stSlotMigrating && !f.called {
		f.t.Errorf("the case runs in %s but made no call through f.call", stSlotMigrating)
	}
	for sh := range confGrown {
		f.checkCounts(sh)
	}
}

// checkCounts compares shard sh's counts hash with a count of its tasks
// by state: leased (in flight), dead, scheduled (delayed set or far
// tier: data in no set and not pending); ready tasks are not counted.
func (f *confFixture) checkCounts(sh int) {
	f.t.Helper()
	k := f.l0.Keys
	blobs, err := f.rdb.HGetAll(f.ctx, k.Tasks(sh)).Result()
	if err != nil {
		f.t.Fatal(err)
	}
	in := func(key string) map[string]bool {
		ids, err := f.rdb.ZRange(f.ctx, key, 0, -1).Result()
		if err != nil {
			f.t.Fatal(err)
		}
		m := map[string]bool{}
		for _, id := range ids {
			m[id] = true
		}
		return m
	}
	delayed, inflight, dead := in(k.Delayed(sh)), in(k.Inflight(sh)), in(k.Dead(sh))
	pending := map[string]map[string]bool{}
	want := map[string]int64{}
	for id, blob := range blobs {
		q := blobQueue(f.s, blob)
		if pending[q] == nil {
			pending[q] = in(k.Pending(sh, q))
		}
		switch {
		case inflight[id]:
			want["l|"+q]++
		case dead[id]:
			want["d|"+q]++
		case delayed[id]:
			want["s|"+q]++
		case pending[q][id]:
		default: // the far tier
			want["s|"+q]++
		}
	}
	for id := range dead {
		if _, ok := blobs[id]; !ok {
			want["d|"]++
		}
	}
	have := countsOf(f.t, f.ctx, f.rdb, f.l0, sh)
	if fmt.Sprint(have) != fmt.Sprint(want) {
		f.t.Errorf("[%s] shard %d's counts hash is %v, but it holds %v", pCounts, sh, have, want)
	}
}

// waitLeaseExpired waits until Redis's clock is past d's lease deadline.
func (f *confFixture) waitLeaseExpired(d Delivery) {
	f.t.Helper()
	testenv.WaitFor(f.t, 5*time.Second, "the lease to expire on Redis's clock", func() (bool, string) {
		now := f.now()
		return now.After(d.Deadline), fmt.Sprintf("now %v, deadline %v", now, d.Deadline)
	})
}
