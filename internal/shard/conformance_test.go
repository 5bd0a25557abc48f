package shard

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// The Lua protocol as a tested contract (docs/protocol.md, "Conformance
// suite"). Every script in lua/ is called through its Go caller in this
// package against real Redis servers, one table of cases run in every
// state its contract promises to hold in:
//
//   - topologies: one standalone Redis, one Sentinel setup (a primary, a
//     replica, three sentinels; the store uses the failover client) and
//     one Redis Cluster (3 primaries), shared by the whole suite: each
//     case gets a namespace of its own (on the cluster, one whose slots
//     no other case uses) and runs in parallel with the others;
//   - states: stable; on the cluster, the shard's slot migrating between
//     nodes with some keys moved (stSlotMigrating); and the three states
//     of a change of the shard count (4 -> 8 shards): sealed, redirecting
//     and resharding, on every topology.
//
// Before each case, shard 1 holds a task of every kind (confRoles);
// after it, every shard's counts hash must equal what the shard holds
// (pCounts). A case names the properties it checks (confProp); a failed
// check says which ("[F] ..."). TestConformanceMatrix keeps the table of
// scripts × states × properties in docs/protocol.md equal to this one.
//
// To add a script: give it cases here (through its Go caller; the
// per-shard one where the public method adds placement), with the states
// in which its contract must hold, and regenerate the docs' matrix
// (UPDATE_CONFORMANCE_MATRIX=1 go test ./internal/shard -run
// TestConformanceMatrix).

// confCase is one case of the suite.
type confCase struct {
	script string // the file in lua/ it calls
	// also names other scripts the case calls and checks on the way (for
	// the matrix).
	also []string
	name string
	// states it runs in (each on every topology that has the state).
	states []confState
	// props it checks, in every one of its states (pTryAgain: in
	// stSlotMigrating, see confFixture.call).
	props []confProp
	// prepare seeds more, before the namespace enters the state.
	prepare func(f *confFixture)
	run     func(t *testing.T, f *confFixture)
}

var (
	allStates   = []confState{stStable, stSealed, stRedirecting, stResharding}
	allAndSlot  = []confState{stStable, stSlotMigrating, stSealed, stRedirecting, stResharding}
	onlySlot    = []confState{stSlotMigrating}
	onlyReshard = []confState{stResharding}
	older       = []confState{stSealed, stRedirecting, stResharding}
)

// confSchedule returns a schedule name whose home is shard confShard in
// both counts.
func confSchedule(prefix string) string {
	return testenv.IDs(prefix, 1, func(n string) bool { return testenv.ShardOf(n, confGrown) == confShard })[0]
}

// stalerLayout is a layout of a generation no marker has: a replica that
// missed changes.
func stalerLayout(t *testing.T, f *confFixture) Layout {
	l, err := f.l0.withChange(7, confGrown, confShards)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// prepareMoving seeds tasks of shard confShard that a change to confGrown
// moves to confNewShard, in f.id: msched (q2, in an hour), msoon (q1, in
// 20 s: within the export margin), mready (ready), mdead (dead), mfar
// (q2, far tier). The seeded due task is ready after it.
func prepareMoving(f *confFixture) {
	ids := f.newIDs(5, true)
	for i, r := range []string{"msched", "msoon", "mready", "mdead", "mfar"} {
		f.id[r] = ids[i]
	}
	a := f.claimOne(f.popOne(f.id["mdead"]), 0).NackArgs(false, "fatal")
	a.Dead = true
	if _, err := f.s.Nack(f.ctx, a); err != nil {
		f.t.Fatal(err)
	}
	now := f.now()
	f.enqueue(f.s, "q1", now.Add(-time.Second), f.id["mready"])
	if r, err := f.s.Move(f.ctx, f.sh, confEpoch, 100); err != nil || r.Moved != 1 { // mready (the seeded due moved with mdead)
		f.t.Fatalf("move: %+v, %v", r, err)
	}
	f.enqueue(f.s, "q2", now.Add(time.Hour), f.id["msched"])
	f.enqueue(f.s, "q1", now.Add(20*time.Second), f.id["msoon"])
	f.enqueue(f.s, "q2", f.farDue, f.id["mfar"])
}

// declare makes the keys a script declares that the seed has not made
// exist (with an entry no case reads), so that during a slot migration
// it is the script's own check of its undeclared keys (lib.lua's
// served_here) that answers TRYAGAIN, not Redis's for a declared key
// that exists on neither node.
func declare(t *testing.T, f *confFixture, keys ...string) {
	t.Helper()
	for _, k := range keys {
		var err error
		switch {
		case strings.HasSuffix(k, ":periodic"), strings.HasSuffix(k, ":outbox"):
			err = f.rdb.HSet(f.ctx, k, "unused", "1").Err()
		default: // a set: the imported ids
			err = f.rdb.SAdd(f.ctx, k, "unused").Err()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func wantErr(t *testing.T, p confProp, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("[%s] %s: %v, want %v", p, what, err, want)
	}
}

func noErr(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("[%s] %s: %v", pBehaviour, what, err)
	}
}

var conformanceCases = []confCase{
	// enqueue.lua: the protocol producers in other languages call.
	{script: "enqueue.lua", name: "outcomes", states: []confState{stStable, stResharding}, props: []confProp{pBehaviour, pCounts},
		run: func(t *testing.T, f *confFixture) {
			ids := f.newIDs(3, false)
			due := f.now().Add(time.Minute).Truncate(time.Millisecond)
			res, redirected := confEnqueueIn(f.ctx, f.s, f.s.Layout(), []EnqueueArgs{
				{ID: ids[0], Queue: "q1", Due: due, MaxRetries: -1},
				{ID: f.id["sched"], Queue: "q1", MaxRetries: -1},
				{ID: f.id["ready"], Queue: "q1", MaxRetries: -1},
				{ID: ids[1], Queue: "nope", MaxRetries: -1},
				{ID: ids[1], Queue: "q1", Payload: make([]byte, 1025), MaxRetries: -1},
				{ID: ids[1], Queue: "q1", MaxRetries: 1001},
				{ID: ids[2], Queue: "q2", Due: f.farDue, MaxRetries: -1},
			})
			if redirected {
				t.Fatalf("redirected on the current layout: %+v", res)
			}
			if res[0].Err != nil || !res[0].Due.Equal(due) {
				t.Errorf("new task: %+v", res[0])
			}
			if !errors.Is(res[1].Err, ErrDuplicate) || res[1].State != "scheduled" || res[1].Due.IsZero() {
				t.Errorf("duplicate of a scheduled task: %+v", res[1])
			}
			if !errors.Is(res[2].Err, ErrDuplicate) || res[2].State != "ready" || !res[2].Due.IsZero() {
				t.Errorf("duplicate of a ready task: %+v", res[2])
			}
			wantErr(t, pBehaviour, "unknown queue", res[3].Err, ErrUnknownQueue)
			wantErr(t, pBehaviour, "payload too large", res[4].Err, ErrPayloadTooLarge)
			wantErr(t, pBehaviour, "too many retries", res[5].Err, ErrInvalidArgument)
			if res[6].Err != nil {
				t.Errorf("far task: %+v", res[6])
			}
			if _, err := f.rdb.ZScore(f.ctx, f.l0.Delayed(f.sh), ids[2]).Result(); err == nil {
				t.Errorf("a task due in two hours is in the delayed set, want the far tier")
			}
			if n := f.rdb.HLen(f.ctx, f.l0.Tasks(f.sh)).Val(); n != int64(len(confRoles)+2) {
				t.Errorf("shard holds %d tasks, want %d", n, len(confRoles)+2)
			}
		}},
	{script: "enqueue.lua", name: "task ids", states: []confState{stStable, stResharding}, props: []confProp{pBehaviour, pCounts},
		run: func(t *testing.T, f *confFixture) {
			// The script's verdict on each id is ValidID's: ids with
			// control characters or invalid UTF-8 are refused and
			// nothing is stored; UTF-8 text is accepted.
			ids := []string{"plain-1", "größe-2", "✓ order 3", "emoji-😀", "tab\there", "cr\rlf\n", "nul\x00", "esc\x1b[31m",
				"del\x7f", "nel\u0085", "csi\u009b", "nbsp\u00a0", "bad\xff", "overlong\xc0\xaf", "surrogate\xed\xa0\x80",
				"above\xf4\x90\x80\x80", "cut\xe2\x9c", "pipe|", "", strings.Repeat("é", 128), strings.Repeat("é", 128) + "x"}
			as := make([]EnqueueArgs, len(ids))
			for i, id := range ids {
				as[i] = EnqueueArgs{ID: id, Queue: "q1", Delay: time.Hour, MaxRetries: -1}
			}
			res, _ := confEnqueueIn(f.ctx, f.s, f.s.Layout(), as)
			for i, id := range ids {
				stored, err := f.rdb.HExists(f.ctx, f.l0.Tasks(f.s.Layout().ShardOf(id)), id).Result()
				noErr(t, "look the id up", err)
				switch ok := ValidID(id); {
				case ok && (res[i].Err != nil || !stored):
					t.Errorf("[%s] id %q: %v (stored %v), want it enqueued", pBehaviour, id, res[i].Err, stored)
				case !ok && (!errors.Is(res[i].Err, ErrInvalidArgument) || !strings.Contains(res[i].Err.Error(), "invalid task id") || stored):
					t.Errorf("[%s] id %q: %v (stored %v), want it refused as an invalid task id", pBehaviour, id, res[i].Err, stored)
				}
			}
		}},
	{script: "enqueue.lua", name: "a producer on an older generation", states: older, props: []confProp{pLayout, pCounts},
		run: func(t *testing.T, f *confFixture) {
			id := f.newIDs(1, true)[0]
			stale := NewStore(f.rdb, f.l0)
			before := f.snapshot()
			res, redirected := confEnqueueIn(f.ctx, stale, f.l0, []EnqueueArgs{{ID: id, Queue: "q1", Delay: time.Hour, MaxRetries: -1}})
			switch f.state {
			case stSealed:
				if redirected || !strings.Contains(fmt.Sprint(res[0].Err), "TRYAGAIN") {
					t.Errorf("[%s] enqueue on generation 0 while sealed: %+v, want TRYAGAIN", pLayout, res[0])
				}
			default:
				if !redirected || !errors.Is(res[0].Err, ErrLayoutChanged) {
					t.Errorf("[%s] enqueue on generation 0: %+v, want LAYOUT", pLayout, res[0])
				}
				if l := stale.Layout(); l.Gen() != 1 || l.Shards() != confGrown || l.From() != confShards {
					t.Errorf("[%s] the producer adopted %+v, want generation 1: 8 shards from 4", pLayout, l)
				}
			}
			f.unchanged(pLayout, "the refused enqueue", before)
			// The public caller follows the redirect to the new shard.
			r := f.old.Enqueue(f.ctx, EnqueueArgs{ID: id, Queue: "q1", Delay: time.Hour, MaxRetries: -1})
			if f.state == stSealed {
				if !strings.Contains(fmt.Sprint(r.Err), "TRYAGAIN") {
					t.Errorf("[%s] Enqueue while sealed: %v, want TRYAGAIN", pLayout, r.Err)
				}
				return
			}
			if r.Err != nil || !f.rdb.HExists(f.ctx, f.l0.Tasks(confNewShard), id).Val() || f.rdb.HExists(f.ctx, f.l0.Tasks(confShard), id).Val() {
				t.Errorf("[%s] Enqueue after the redirect: %v; want the task in shard %d alone", pLayout, r.Err, confNewShard)
			}
		}},
	{script: "enqueue.lua", name: "far bucket moved", states: onlySlot, props: []confProp{pBehaviour, pTryAgain, pCounts},
		run: func(t *testing.T, f *confFixture) {
			id := f.newIDs(1, false)[0]
			err := f.call([]string{"far:"}, func() error {
				return f.s.Enqueue(f.ctx, EnqueueArgs{ID: id, Queue: "q2", Due: f.farDue, MaxRetries: -1}).Err
			})
			noErr(t, "enqueue after the slot migration", err)
		}},
	{script: "enqueue.lua", name: "every key moved (ASK)", states: onlySlot, props: []confProp{pBehaviour, pCounts},
		run: func(t *testing.T, f *confFixture) {
			// Into the delayed set and the far bucket that exists: a bucket
			// list that exists nowhere cannot be told from one not moved
			// yet, and such a call waits for the end of the migration
			// (TRYAGAIN; docs/protocol.md, "Slot migrations").
			ids := f.newIDs(2, false)
			err := f.callAsk(func() error {
				var errs []error
				for i, due := range []time.Time{f.now().Add(500 * time.Millisecond), f.farDue} {
					errs = append(errs, f.s.Enqueue(f.ctx, EnqueueArgs{ID: ids[i], Queue: "q2", Due: due, MaxRetries: -1}).Err)
				}
				return errors.Join(errs...)
			})
			noErr(t, "enqueue on the importing node", err)
		}},
	{script: "enqueue.lua", name: "an id live in its old shard", states: onlyReshard, props: []confProp{pOutbox, pCounts},
		prepare: prepareMoving,
		run: func(t *testing.T, f *confFixture) {
			id := f.id["msched"]
			again := func() EnqueueResult {
				return f.s.Enqueue(f.ctx, EnqueueArgs{ID: id, Queue: "q2", Delay: time.Hour, MaxRetries: -1})
			}
			wantErr(t, pOutbox, "enqueue of an id stored in its old shard", again().Err, ErrDuplicate)
			l := f.s.Layout()
			if _, err := f.s.Export(f.ctx, l, f.sh, confEpoch, time.Minute, []string{id}); err != nil {
				t.Fatal(err)
			}
			wantErr(t, pOutbox, "enqueue of an id in its old shard's outbox", again().Err, ErrDuplicate)
			if _, err := confCancelIn(f.ctx, f.s, l, f.sh, id); err != nil {
				t.Fatal(err)
			}
			wantErr(t, pOutbox, "enqueue of an id cancelled on its way", again().Err, ErrInTransit)
			if f.rdb.HExists(f.ctx, f.l0.Tasks(confNewShard), id).Val() {
				t.Errorf("[%s] the refused enqueues stored %s in its new shard", pOutbox, id)
			}
		}},

	// fire.lua: enqueue.lua as a function, fenced, recorded once.
	{script: "fire.lua", name: "fires each occurrence once", states: allStates, props: []confProp{pBehaviour, pCounts},
		run: func(t *testing.T, f *confFixture) {
			name := confSchedule("fire")
			l := f.s.Layout()
			base := f.now().Add(time.Minute).Truncate(time.Second)
			fire := func(occ time.Time, paused bool) FireResult {
				t.Helper()
				id := l.OccurrenceID(name, occ)
				r, err := f.s.Fire(f.ctx, f.sh, FireArgs{Schedule: name, Occurrence: occ, Epoch: confEpoch, Paused: paused,
					Task: EnqueueArgs{ID: id, Queue: "q1", Due: occ, MaxRetries: -1}})
				noErr(t, "fire", err)
				return r
			}
			if r := fire(base, false); r.Outcome != Fired {
				t.Errorf("first occurrence: %+v", r)
			}
			if r := fire(base, false); r.Outcome != AlreadyFired {
				t.Errorf("the same occurrence again: %+v", r)
			}
			if r := fire(base.Add(time.Second), true); r.Outcome != SkippedPaused {
				t.Errorf("paused: %+v", r)
			}
			if info, err := confLookupIn(f.ctx, f.s, l, f.sh, l.OccurrenceID(name, base)); err != nil || info.State != "scheduled" {
				t.Errorf("the occurrence's task: %+v, %v", info, err)
			}
		}},
	{script: "fire.lua", name: "stale owner", states: allStates, props: []confProp{pFence},
		run: func(t *testing.T, f *confFixture) {
			name, occ := confSchedule("fire"), f.now().Add(time.Minute)
			id := f.s.Layout().OccurrenceID(name, occ)
			f.fenced("fire", func() error {
				_, err := f.s.Fire(f.ctx, f.sh, FireArgs{Schedule: name, Occurrence: occ, Epoch: confEpoch - 1,
					Task: EnqueueArgs{ID: id, Queue: "q1", Due: occ, MaxRetries: -1}})
				return err
			})
		}},
	{script: "fire.lua", name: "far bucket moved", states: onlySlot, props: []confProp{pBehaviour, pTryAgain, pCounts},
		run: func(t *testing.T, f *confFixture) {
			name := confSchedule("fire")
			id := f.s.Layout().OccurrenceID(name, f.farDue)
			declare(t, f, f.l0.Periodic(f.sh))
			var r FireResult
			err := f.call([]string{"far:"}, func() (err error) {
				r, err = f.s.Fire(f.ctx, f.sh, FireArgs{Schedule: name, Occurrence: f.farDue, Epoch: confEpoch,
					Task: EnqueueArgs{ID: id, Queue: "q2", Due: f.farDue, MaxRetries: -1}})
				return err
			})
			if err != nil || r.Outcome != Fired {
				t.Errorf("fire after the slot migration: %+v, %v; want fired (the refused call recorded nothing)", r, err)
			}
		}},

	// move.lua: the owner's mover.
	{script: "move.lua", name: "moves due tasks", states: allAndSlot, props: []confProp{pBehaviour, pTryAgain, pCounts},
		run: func(t *testing.T, f *confFixture) {
			var r MoveResult
			err := f.call([]string{"ready:q1"}, func() (err error) {
				r, err = f.s.Move(f.ctx, f.sh, confEpoch, 100)
				return err
			})
			noErr(t, "move", err)
			if r.Moved != 1 {
				t.Errorf("moved %d, want the due task", r.Moved)
			}
			if info, err := confLookupIn(f.ctx, f.s, f.s.Layout(), f.sh, f.id["due"]); err != nil || info.State != "ready" {
				t.Errorf("the due task after the move: %+v, %v", info, err)
			}
		}},
	{script: "move.lua", name: "declared keys moved, lists not", states: onlySlot, props: []confProp{pBehaviour, pTryAgain, pCounts},
		run: func(t *testing.T, f *confFixture) {
			// ASK to the target, where the lists are not: served_here
			// refuses there.
			declared := []string{"delayed", "tasks", "epoch", "dead", "dead:info", "stats", "seq", "readyqueues", "far", "counts", "queues"}
			var r MoveResult
			err := f.call(declared, func() (err error) {
				r, err = f.s.Move(f.ctx, f.sh, confEpoch, 100)
				return err
			})
			if err != nil || r.Moved != 1 {
				t.Errorf("move after the slot migration: %+v, %v", r, err)
			}
		}},
	{script: "move.lua", name: "every key moved (ASK)", states: onlySlot, props: []confProp{pBehaviour, pCounts},
		run: func(t *testing.T, f *confFixture) {
			var r MoveResult
			err := f.callAsk(func() (err error) {
				r, err = f.s.Move(f.ctx, f.sh, confEpoch, 100)
				return err
			})
			if err != nil || r.Moved != 1 {
				t.Errorf("move on the importing node: %+v, %v", r, err)
			}
		}},
	{script: "move.lua", name: "buries a task of an unknown queue", states: allStates, props: []confProp{pBehaviour, pCounts},
		run: func(t *testing.T, f *confFixture) {
			// As a producer that skips enqueue.lua's check would store it
			// (counted scheduled, as enqueue.lua counts).
			id := f.newIDs(1, false)[0]
			ms := strconv.FormatInt(f.now().Add(-time.Second).UnixMilli(), 10)
			noErr(t, "seed", f.rdb.HSet(f.ctx, f.key("tasks"), id, "1|ghost|0|3|30000|"+ms+"|"+ms+"|x").Err())
			noErr(t, "seed", f.rdb.ZAdd(f.ctx, f.key("delayed"), redis.Z{Score: float64(f.now().UnixMilli() - 1000), Member: id}).Err())
			noErr(t, "seed", f.rdb.HIncrBy(f.ctx, f.key("counts"), "s|ghost", 1).Err())
			r, err := f.s.Move(f.ctx, f.sh, confEpoch, 100)
			noErr(t, "move", err)
			if r.Buried != 1 || r.Moved != 1 {
				t.Errorf("move: %+v, want the unknown queue's task buried and the due task moved", r)
			}
			if info, err := confLookupIn(f.ctx, f.s, f.s.Layout(), f.sh, id); err != nil || info.State != "dead" || !strings.Contains(info.DeadInfo, `"unknown queue"`) {
				t.Errorf("the unknown queue's task: %+v, %v", info, err)
			}
		}},
	{script: "move.lua", name: "overwrites a stored epoch that is not a number", states: allStates, props: []confProp{pFence},
		run: func(t *testing.T, f *confFixture) {
			noErr(t, "seed", f.rdb.Set(f.ctx, f.key("epoch"), "garbage", 0).Err())
			if _, err := f.s.Move(f.ctx, f.sh, confEpoch, 100); err != nil {
				t.Errorf("[%s] move over a corrupt epoch: %v", pFence, err)
			}
			if got, _ := f.s.StoredEpoch(f.ctx, f.sh); got != confEpoch {
				t.Errorf("[%s] stored epoch %d, want the caller's %d", pFence, got, confEpoch)
			}
			if n, _ := f.rdb.HGet(f.ctx, f.key("stats"), "corrupt_epoch").Int(); n != 1 {
				t.Errorf("[%s] corrupt_epoch = %d, want 1", pFence, n)
			}
			f.fenced("move after the overwrite", func() error { _, err := f.s.Move(f.ctx, f.sh, confEpoch-1, 100); return err })
		}},
	{script: "move.lua", name: "stale owner", states: allStates, props: []confProp{pFence},
		run: func(t *testing.T, f *confFixture) {
			f.fenced("move", func() error { _, err := f.s.Move(f.ctx, f.sh, confEpoch-1, 100); return err })
			if _, err := f.s.Move(f.ctx, f.sh, confEpoch+1, 100); err != nil {
				t.Fatal(err)
			}
			if e, _ := f.s.StoredEpoch(f.ctx, f.sh); e != confEpoch+1 {
				t.Errorf("[%s] stored epoch %d after a newer owner's call, want %d", pFence, e, confEpoch+1)
			}
			f.fenced("move by the previous owner", func() error { _, err := f.s.Move(f.ctx, f.sh, confEpoch, 100); return err })
		}},

	// movemany.lua: move.lua for several shards of one server in one call
	// (on a cluster, MoveMany pipelines move.lua per shard instead).
	{script: "movemany.lua", name: "each shard as a call of its own", states: allStates, props: []confProp{pBehaviour, pCounts},
		run: func(t *testing.T, f *confFixture) {
			out := f.s.MoveMany(f.ctx, []MoveRequest{{Shard: f.sh, Epoch: confEpoch, Limit: 100}, {Shard: confOther, Epoch: 1, Limit: 100}})
			noErr(t, "movemany", errors.Join(out[0].Err, out[1].Err))
			if out[0].Result.Moved != 1 || out[1].Result.Moved != 0 || out[1].Result.NextDue != -1 {
				t.Errorf("movemany: %+v, want the due task moved from shard %d and nothing from shard %d", out, f.sh, confOther)
			}
			if info, err := confLookupIn(f.ctx, f.s, f.s.Layout(), f.sh, f.id["due"]); err != nil || info.State != "ready" {
				t.Errorf("the due task after the move: %+v, %v", info, err)
			}
			if e, _ := f.s.StoredEpoch(f.ctx, confOther); e != 1 {
				t.Errorf("shard %d's stored epoch %d, want 1: each shard is fenced by its own epoch", confOther, e)
			}
		}},
	{script: "movemany.lua", name: "stale owner of one shard", states: allStates, props: []confProp{pFence},
		run: func(t *testing.T, f *confFixture) {
			before := f.snapshot()
			out := f.s.MoveMany(f.ctx, []MoveRequest{{Shard: f.sh, Epoch: confEpoch - 1, Limit: 100}, {Shard: confOther, Epoch: 1, Limit: 100}})
			wantErr(t, pFence, "movemany of the stale shard", out[0].Err, ErrStaleEpoch)
			if out[1].Err != nil {
				t.Errorf("[%s] movemany of the other shard: %v, want it moved on its own", pFence, out[1].Err)
			}
			f.unchanged(pFence, "movemany with a stale epoch", before, f.l0.Stats(f.sh), f.l0.Epoch(confOther), f.l0.Far(confOther))
		}},

	// The delivery scripts: claim, ack, nack, extend, release.
	{script: "claim.lua", name: "leases a popped entry", states: allAndSlot, props: []confProp{pBehaviour, pTryAgain, pCounts},
		run: func(t *testing.T, f *confFixture) {
			d := f.d["popped"]
			var ds []Delivery
			err := f.call([]string{"pending:q1"}, func() (err error) {
				ds, err = f.s.Claim(f.ctx, f.sh, "q1", []string{d.Ref(), "999999|nobody"}, 0)
				return err
			})
			noErr(t, "claim", err)
			if len(ds) != 1 || ds[0].Task.ID != d.Task.ID || ds[0].Token != d.Token {
				t.Fatalf("claim: %+v, want the popped entry alone, its token kept", ds)
			}
			again, err := f.s.Claim(f.ctx, f.sh, "q1", []string{d.Ref()}, 0)
			if err != nil || len(again) != 1 || !again[0].Deadline.Equal(ds[0].Deadline) {
				t.Errorf("a repeated claim: %+v, %v; want the same lease", again, err)
			}
		}},
	{script: "ack.lua", name: "leased and unleased deliveries", states: allAndSlot, props: []confProp{pBehaviour, pTryAgain, pCounts},
		run: func(t *testing.T, f *confFixture) {
			acks := []AckArgs{f.d["leased"].AckArgs(false), f.d["popped"].AckArgs(true)}
			var errs []error
			err := f.call([]string{"pending:q1"}, func() error {
				errs = f.s.AckBatch(f.ctx, acks)
				return errors.Join(errs...)
			})
			noErr(t, "ack", err)
			for i, err := range f.s.AckBatch(f.ctx, acks) {
				wantErr(t, pBehaviour, "a repeated ack "+strconv.Itoa(i), err, ErrStaleToken)
			}
			for _, r := range []string{"leased", "popped"} {
				if _, err := confLookupIn(f.ctx, f.s, f.s.Layout(), f.sh, f.id[r]); !errors.Is(err, ErrNotFound) {
					t.Errorf("%s after its ack: %v, want it gone", r, err)
				}
			}
		}},
	{script: "succeed.lua", also: []string{"lookup.lua", "recover.lua"}, name: "records the result, bounded by age and count", states: allAndSlot, props: []confProp{pBehaviour, pTryAgain, pCounts},
		prepare: func(f *confFixture) {
			// q1 keeps one record per shard.
			if err := f.s.RegisterQueues(f.ctx, map[string]QueuePolicy{"q1": {MaxRetries: 3, Timeout: 30 * time.Second, MaxPayload: 1024,
				Retention: Retention{Age: time.Minute, Count: 1}}}); err != nil {
				f.t.Fatal(err)
			}
		},
		run: func(t *testing.T, f *confFixture) {
			done := f.rdb.Subscribe(f.ctx, f.l0.Done(f.id["popped"]))
			defer done.Close()
			if _, err := done.Receive(f.ctx); err != nil {
				t.Fatal(err)
			}
			noErr(t, "succeed the leased task", f.s.Succeed(f.ctx, f.d["leased"].AckArgs(false), []byte("first")))
			err := f.call([]string{"pending:q1"}, func() error {
				return f.s.Succeed(f.ctx, f.d["popped"].AckArgs(true), []byte("a|result"))
			})
			noErr(t, "succeed the popped task", err)
			wantErr(t, pBehaviour, "a repeated success", f.s.Succeed(f.ctx, f.d["popped"].AckArgs(true), nil), ErrStaleToken)
			if m, err := done.ReceiveMessage(f.ctx); err != nil || m.Payload != "succeeded" {
				t.Errorf("the done channel: %v, %v; want \"succeeded\"", m, err)
			}
			l := f.s.Layout()
			info, err := confLookupIn(f.ctx, f.s, l, f.sh, f.id["popped"])
			if err != nil || info.State != "succeeded" || string(info.Result) != "a|result" || info.Task.Queue != "q1" || info.At.IsZero() {
				t.Errorf("lookup of the succeeded task: %+v, %v; want succeeded with its result", info, err)
			}
			if _, err := confLookupIn(f.ctx, f.s, l, f.sh, f.id["leased"]); !errors.Is(err, ErrNotFound) {
				t.Errorf("the older record beyond the count of 1: %v, want it deleted", err)
			}
			if f.state == stSlotMigrating {
				return
			}
			// Past the retention: the owner's recovery pass deletes it,
			// also once the queue keeps no more records (its retention
			// turned off: the records it kept still go).
			if err := f.s.RegisterQueues(f.ctx, map[string]QueuePolicy{"q1": {MaxRetries: 3, Timeout: 30 * time.Second, MaxPayload: 1024}}); err != nil {
				t.Fatal(err)
			}
			idx := f.l0.EndedIndex(f.sh, "q1")
			if err := f.rdb.ZAddXX(f.ctx, idx, redis.Z{Score: float64(time.Now().Add(-2 * time.Minute).UnixMilli()), Member: f.id["popped"]}).Err(); err != nil {
				t.Fatal(err)
			}
			r, err := f.s.Recover(f.ctx, f.sh, confEpoch, RecoverArgs{Limit: 100})
			if err != nil || r.Expired != 1 {
				t.Errorf("recover: %+v, %v; want the expired record deleted", r, err)
			}
			if _, err := confLookupIn(f.ctx, f.s, l, f.sh, f.id["popped"]); !errors.Is(err, ErrNotFound) {
				t.Errorf("the record past its retention after recovery: %v, want it deleted", err)
			}
			if n, _ := f.rdb.Exists(f.ctx, idx, f.l0.Ended(f.sh)).Result(); n != 0 {
				t.Errorf("%d of the ended hash and index left, want none", n)
			}
			if ok, _ := f.rdb.HExists(f.ctx, f.l0.Queues(f.sh), "|rec|q1").Result(); ok {
				t.Error("the queue's |rec| field left with no record")
			}
		}},
	{script: "ack.lua", name: "every key moved (ASK)", states: onlySlot, props: []confProp{pBehaviour, pCounts},
		run: func(t *testing.T, f *confFixture) {
			err := f.callAsk(func() error {
				return errors.Join(f.s.AckBatch(f.ctx, []AckArgs{f.d["leased"].AckArgs(false), f.d["popped"].AckArgs(true)})...)
			})
			noErr(t, "ack on the importing node", err)
		}},
	{script: "nack.lua", name: "retries and buries", states: allAndSlot, props: []confProp{pBehaviour, pTryAgain, pCounts},
		run: func(t *testing.T, f *confFixture) {
			retry := f.d["popped"].NackArgs(true, "boom")
			retry.RetryAfter = time.Hour
			var r NackResult
			err := f.call([]string{"pending:q1"}, func() (err error) {
				r, err = f.s.Nack(f.ctx, retry)
				return err
			})
			noErr(t, "nack", err)
			if r.Dead || r.Attempts != 1 || time.Until(r.Due) < 50*time.Minute {
				t.Errorf("retry: %+v", r)
			}
			dead := f.d["leased"].NackArgs(false, "fatal")
			dead.Dead = true
			if r, err := f.s.Nack(f.ctx, dead); err != nil || !r.Dead {
				t.Errorf("not retryable: %+v, %v", r, err)
			}
			_, err = f.s.Nack(f.ctx, dead)
			wantErr(t, pBehaviour, "a repeated nack", err, ErrStaleToken)
			if info, err := confLookupIn(f.ctx, f.s, f.s.Layout(), f.sh, f.id["leased"]); err != nil || info.State != "dead" || !strings.Contains(info.DeadInfo, "not retryable") {
				t.Errorf("the buried task: %+v, %v", info, err)
			}
		}},
	{script: "extend.lua", name: "extends a lease", states: allStates, props: []confProp{pBehaviour},
		run: func(t *testing.T, f *confFixture) {
			at, err := f.s.Extend(f.ctx, f.d["leased"], time.Hour)
			if err != nil || time.Until(at) < 50*time.Minute {
				t.Errorf("extend: %v, %v", at, err)
			}
			_, err = f.s.Extend(f.ctx, f.d["popped"], time.Hour)
			wantErr(t, pBehaviour, "extend of a delivery without a lease", err, ErrStaleToken)
		}},
	{script: "release.lua", name: "gives a delivery back", states: allAndSlot, props: []confProp{pBehaviour, pTryAgain, pCounts},
		run: func(t *testing.T, f *confFixture) {
			err := f.call([]string{"ready:q1"}, func() error { return f.s.Release(f.ctx, f.d["leased"]) })
			noErr(t, "release", err)
			if info, err := confLookupIn(f.ctx, f.s, f.s.Layout(), f.sh, f.id["leased"]); err != nil || info.State != "ready" || info.Task.Attempts != 0 {
				t.Errorf("the released task: %+v, %v", info, err)
			}
			wantErr(t, pBehaviour, "a repeated release", f.s.Release(f.ctx, f.d["leased"]), ErrStaleToken)
		}},

	// recover.lua: the owner's recovery pass.
	{script: "recover.lua", name: "takes an expired lease back", states: allAndSlot, props: []confProp{pBehaviour, pTryAgain, pCounts},
		run: func(t *testing.T, f *confFixture) {
			f.waitLeaseExpired(f.d["expired"])
			var r RecoverResult
			err := f.call([]string{"pending:q1"}, func() (err error) {
				r, err = f.s.Recover(f.ctx, f.sh, confEpoch, RecoverArgs{Limit: 100})
				return err
			})
			noErr(t, "recover", err)
			if r.Retried != 1 || len(r.Candidates) != 1 {
				t.Errorf("recovery: %+v; want the expired lease retried and the popped task a candidate", r)
			}
			if info, err := confLookupIn(f.ctx, f.s, f.s.Layout(), f.sh, f.id["expired"]); err != nil || info.State != "scheduled" || info.Task.Attempts != 1 {
				t.Errorf("the expired lease's task: %+v, %v", info, err)
			}
		}},
	{script: "recover.lua", name: "buries corrupt due times", states: allStates, props: []confProp{pBehaviour, pCounts},
		run: func(t *testing.T, f *confFixture) {
			noErr(t, "seed", f.rdb.Do(f.ctx, "ZADD", f.key("delayed"), "XX", "+inf", f.id["sched"]).Err())
			noErr(t, "seed", f.rdb.Do(f.ctx, "ZADD", f.key("delayed"), "XX", "1e300", f.id["retry"]).Err())
			if info, err := confLookupIn(f.ctx, f.s, f.s.Layout(), f.sh, f.id["sched"]); err != nil || !info.CorruptDue {
				t.Errorf("lookup of a corrupt due time: %+v, %v", info, err)
			}
			r, err := f.s.Recover(f.ctx, f.sh, confEpoch, RecoverArgs{Limit: 100})
			noErr(t, "recover", err)
			if r.Buried != 2 {
				t.Errorf("recovery: %+v, want the two corrupt due times buried", r)
			}
			for _, role := range []string{"sched", "retry"} {
				if info, err := confLookupIn(f.ctx, f.s, f.s.Layout(), f.sh, f.id[role]); err != nil || info.State != "dead" || !strings.Contains(info.DeadInfo, `"corrupt due time"`) {
					t.Errorf("%s after recovery: %+v, %v", role, info, err)
				}
			}
		}},
	{script: "recover.lua", name: "stale owner", states: allStates, props: []confProp{pFence},
		run: func(t *testing.T, f *confFixture) {
			f.fenced("recover", func() error {
				_, err := f.s.Recover(f.ctx, f.sh, confEpoch-1, RecoverArgs{Limit: 100})
				return err
			})
		}},

	// cancel.lua and lookup.lua: by id, in one shard.
	{script: "cancel.lua", name: "each state", states: allStates, props: []confProp{pBehaviour, pCounts},
		run: func(t *testing.T, f *confFixture) {
			l := f.s.Layout()
			for role, want := range map[string]string{"sched": "scheduled", "far": "scheduled", "ready": "ready", "dead": "dead", "retry": "scheduled"} {
				if got, err := confCancelIn(f.ctx, f.s, l, f.sh, f.id[role]); err != nil || got != want {
					t.Errorf("cancel %s: %q, %v; want %q", role, got, err, want)
				}
			}
			// q2 keeps records: its tasks cancelled before they ran are
			// recorded; q1's are not.
			for role, want := range map[string]string{"sched": "cancelled", "far": "cancelled", "ready": ""} {
				info, err := confLookupIn(f.ctx, f.s, l, f.sh, f.id[role])
				if want == "" && !errors.Is(err, ErrNotFound) || want != "" && (err != nil || info.State != want) {
					t.Errorf("lookup of the cancelled %s task: %+v, %v; want %q", role, info, err, want)
				}
			}
			// A task a worker has ends as cancelled: its lease or popped
			// entry revoked, its id published for the worker, a record kept.
			sub := f.rdb.Subscribe(f.ctx, f.l0.CancelChannel())
			defer sub.Close()
			if _, err := sub.Receive(f.ctx); err != nil {
				t.Fatal(err)
			}
			for _, role := range []string{"leased", "popped"} {
				if got, err := confCancelIn(f.ctx, f.s, l, f.sh, f.id[role]); err != nil || got != "active" {
					t.Errorf("cancel %s: %q, %v; want cancelled from active", role, got, err)
				}
				if m, err := sub.ReceiveMessage(f.ctx); err != nil || m.Payload != f.id[role] {
					t.Errorf("cancel %s: published %v, %v; want its id", role, m, err)
				}
				info, err := confLookupIn(f.ctx, f.s, l, f.sh, f.id[role])
				if err != nil || info.State != "cancelled" || info.Task.Queue != "q1" || info.At.IsZero() {
					t.Errorf("lookup of the cancelled %s task: %+v, %v", role, info, err)
				}
			}
			if err := f.s.AckBatch(f.ctx, []AckArgs{f.d["leased"].AckArgs(false)})[0]; !errors.Is(err, ErrStaleToken) {
				t.Errorf("the late ack of the cancelled leased task: %v, want refused as stale", err)
			}
			if err := f.s.AckBatch(f.ctx, []AckArgs{f.d["popped"].AckArgs(true)})[0]; !errors.Is(err, ErrStaleToken) {
				t.Errorf("the late ack of the cancelled popped task: %v, want refused as stale", err)
			}
			_, err := confCancelIn(f.ctx, f.s, l, f.sh, "nobody")
			wantErr(t, pBehaviour, "cancel of an unknown id", err, ErrNotFound)
		}},
	{script: "cancel.lua", name: "ready task, its lists moved", states: onlySlot, props: []confProp{pBehaviour, pTryAgain, pCounts},
		run: func(t *testing.T, f *confFixture) {
			var state string
			err := f.call([]string{"ready:q1"}, func() (err error) {
				state, err = confCancelIn(f.ctx, f.s, f.s.Layout(), f.sh, f.id["ready"])
				return err
			})
			if err != nil || state != "ready" {
				t.Errorf("cancel after the slot migration: %q, %v", state, err)
			}
		}},
	{script: "cancel.lua", also: []string{"commit.lua"}, name: "a task on its way", states: onlyReshard, props: []confProp{pOutbox, pCounts},
		prepare: prepareMoving,
		run: func(t *testing.T, f *confFixture) {
			l := f.s.Layout()
			ids := []string{f.id["msched"], f.id["mdead"]}
			if _, err := f.s.Export(f.ctx, l, f.sh, confEpoch, time.Minute, ids); err != nil {
				t.Fatal(err)
			}
			for i, want := range []string{"scheduled", "dead"} {
				if got, err := confCancelIn(f.ctx, f.s, l, f.sh, ids[i]); err != nil || got != want {
					t.Errorf("[%s] cancel of an outbox entry: %q, %v; want %q", pOutbox, got, err, want)
				}
				if f.rdb.HExists(f.ctx, f.l0.Outbox(f.sh), ids[i]).Val() || !f.rdb.HExists(f.ctx, f.l0.Cancelled(f.sh), ids[i]).Val() {
					t.Errorf("[%s] the cancelled entry of %s is not in the cancelled hash alone", pOutbox, ids[i])
				}
			}
			cancelled, err := f.s.Commit(f.ctx, f.sh, confEpoch, ids)
			if err != nil || !slices.Equal(cancelled, ids) {
				t.Errorf("[%s] commit: %v, %v; want both reported cancelled", pOutbox, cancelled, err)
			}
		}},
	{script: "lookup.lua", name: "each state", states: allStates, props: []confProp{pBehaviour},
		run: func(t *testing.T, f *confFixture) {
			l := f.s.Layout()
			for role, want := range map[string]string{"sched": "scheduled", "far": "scheduled", "ready": "ready", "popped": "active",
				"leased": "active", "dead": "dead", "retry": "scheduled", "due": "scheduled"} {
				info, err := confLookupIn(f.ctx, f.s, l, f.sh, f.id[role])
				if err != nil || info.State != want || info.Task.ID != f.id[role] || info.DecodeErr != nil {
					t.Errorf("lookup %s: %+v, %v; want %s", role, info, err, want)
				}
			}
			if info, _ := confLookupIn(f.ctx, f.s, l, f.sh, f.id["far"]); !info.At.Equal(f.farDue) {
				t.Errorf("lookup of the far task: due %v, want %v", info.At, f.farDue)
			}
			if info, _ := confLookupIn(f.ctx, f.s, l, f.sh, f.id["retry"]); info.LastError != "boom" || info.Task.Attempts != 1 {
				t.Errorf("lookup of the retried task: %+v", info)
			}
			_, err := confLookupIn(f.ctx, f.s, l, f.sh, "nobody")
			wantErr(t, pBehaviour, "lookup of an unknown id", err, ErrNotFound)
		}},
	{script: "lookup.lua", name: "ready task, its pending set moved", states: onlySlot, props: []confProp{pBehaviour, pTryAgain},
		run: func(t *testing.T, f *confFixture) {
			var info Info
			err := f.call([]string{"pending:q1"}, func() (err error) {
				info, err = confLookupIn(f.ctx, f.s, f.s.Layout(), f.sh, f.id["ready"])
				return err
			})
			if err != nil || info.State != "ready" {
				t.Errorf("lookup after the slot migration: %+v, %v", info, err)
			}
		}},
	{script: "lookup.lua", name: "every key moved (ASK)", states: onlySlot, props: []confProp{pBehaviour},
		run: func(t *testing.T, f *confFixture) {
			var info Info
			err := f.callAsk(func() (err error) {
				info, err = confLookupIn(f.ctx, f.s, f.s.Layout(), f.sh, f.id["popped"])
				return err
			})
			if err != nil || info.State != "active" {
				t.Errorf("lookup on the importing node: %+v, %v; want active", info, err)
			}
		}},
	{script: "lookup.lua", name: "a task on its way", states: onlyReshard, props: []confProp{pOutbox},
		prepare: prepareMoving,
		run: func(t *testing.T, f *confFixture) {
			l := f.s.Layout()
			ids := []string{f.id["msched"], f.id["mdead"], f.id["mfar"]}
			before := map[string]Info{}
			for _, id := range ids {
				before[id], _ = confLookupIn(f.ctx, f.s, l, f.sh, id)
			}
			if r, err := f.s.Export(f.ctx, l, f.sh, confEpoch, time.Minute, ids); err != nil || len(r.Tasks) != 3 {
				t.Fatalf("export: %+v, %v", r, err)
			}
			for _, id := range ids {
				info, err := confLookupIn(f.ctx, f.s, l, f.sh, id)
				if err != nil || info.State != before[id].State || !info.At.Equal(before[id].At) || info.Task.Queue != before[id].Task.Queue {
					t.Errorf("[%s] lookup of %s in the outbox: %+v, %v; want as before %+v", pOutbox, id, info, err, before[id])
				}
			}
		}},

	// change.lua: a pending task changed in place (reschedule, replace).
	{script: "change.lua", also: []string{"lookup.lua"}, name: "each state", states: allStates, props: []confProp{pBehaviour, pCounts},
		run: func(t *testing.T, f *confFixture) {
			later := f.now().Add(3 * time.Hour).Truncate(time.Millisecond)
			for role, was := range map[string]string{"sched": "scheduled", "far": "scheduled", "ready": "ready", "retry": "scheduled", "due": "scheduled"} {
				r, err := confChangeIn(f.ctx, f.s, f.sh, f.id[role], Change{SetDue: true, Due: later})
				if err != nil || r.State != was || !r.Due.Equal(later) {
					t.Errorf("reschedule %s: %+v, %v; want it changed from %s", role, r, err, was)
				}
				info, err := confLookupIn(f.ctx, f.s, f.s.Layout(), f.sh, f.id[role])
				if err != nil || info.State != "scheduled" || !info.At.Equal(later) || !info.Task.Due.Equal(later) {
					t.Errorf("lookup of %s after its reschedule: %+v, %v; want scheduled at %v", role, info, err, later)
				}
			}
			if info, _ := confLookupIn(f.ctx, f.s, f.s.Layout(), f.sh, f.id["retry"]); info.Task.Attempts != 1 || info.LastError != "boom" {
				t.Errorf("the rescheduled retry lost its attempts or last error: %+v", info)
			}
			if n := f.rdb.LLen(f.ctx, f.l0.Ready(f.sh, "q1")).Val(); n != 0 {
				t.Errorf("the rescheduled ready task left %d entries in its ready list", n)
			}
			for _, role := range []string{"leased", "popped"} {
				_, err := confChangeIn(f.ctx, f.s, f.sh, f.id[role], Change{SetDue: true, Due: later})
				wantErr(t, pBehaviour, "reschedule "+role, err, ErrActive)
			}
			_, err := confChangeIn(f.ctx, f.s, f.sh, f.id["dead"], Change{Payload: []byte("x")})
			wantErr(t, pBehaviour, "replace dead", err, ErrDead)
			_, err = confChangeIn(f.ctx, f.s, f.sh, "nobody", Change{SetDue: true, Due: later})
			wantErr(t, pBehaviour, "reschedule of an unknown id", err, ErrNotFound)
		}},
	{script: "change.lua", also: []string{"lookup.lua"}, name: "rules and payloads", states: []confState{stStable}, props: []confProp{pBehaviour, pCounts},
		run: func(t *testing.T, f *confFixture) {
			id := f.id["sched"]
			before, _ := confLookupIn(f.ctx, f.s, f.s.Layout(), f.sh, id)
			old := before.At
			for _, c := range []struct {
				rule DueRule
				at   time.Time
				want time.Time
			}{
				{DueLatest, old.Add(-time.Minute), old},
				{DueEarliest, old.Add(time.Minute), old},
				{DueEarliest, old.Add(-time.Minute), old.Add(-time.Minute)},
				{DueLatest, old.Add(time.Minute), old.Add(time.Minute)},
			} {
				r, err := confChangeIn(f.ctx, f.s, f.sh, id, Change{SetDue: true, Due: c.at, Rule: c.rule})
				if err != nil || !r.Due.Equal(c.want) {
					t.Errorf("rule %s with %v: %+v, %v; want due %v", c.rule, c.at, r, err, c.want)
				}
			}
			_, err := confChangeIn(f.ctx, f.s, f.sh, id, Change{Payload: make([]byte, 1025)})
			wantErr(t, pBehaviour, "replace with a payload over the queue's 1024 bytes", err, ErrPayloadTooLarge)
			_, err = confChangeIn(f.ctx, f.s, f.sh, id, Change{SetDue: true, Due: old, Rule: "soon"})
			wantErr(t, pBehaviour, "an unknown rule", err, ErrInvalidArgument)
			// The ready task keeps its place when it is due at once.
			if r, err := confChangeIn(f.ctx, f.s, f.sh, f.id["ready"], Change{SetDue: true, Due: f.now().Add(-time.Minute)}); err != nil || r.State != "ready" {
				t.Errorf("reschedule the ready task to the past: %+v, %v", r, err)
			}
			if n := f.rdb.LLen(f.ctx, f.l0.Ready(f.sh, "q1")).Val(); n != 1 {
				t.Errorf("the ready task rescheduled to the past: its list holds %d entries, want its one", n)
			}
			// The ready task keeps its place when only its payload changes.
			ready := f.id["ready"]
			entry := f.rdb.LIndex(f.ctx, f.l0.Ready(f.sh, "q1"), 0).Val()
			if r, err := confChangeIn(f.ctx, f.s, f.sh, ready, Change{Payload: []byte("new")}); err != nil || r.State != "ready" {
				t.Errorf("replace the ready task: %+v, %v", r, err)
			}
			e := f.rdb.LIndex(f.ctx, f.l0.Ready(f.sh, "q1"), 0).Val()
			d, ok := f.s.Popped(f.sh, e, time.Now(), 0)
			if !ok || d.Task.ID != ready || string(d.Task.Payload) != "new" || !strings.HasPrefix(e, strings.SplitN(entry, "|", 2)[0]+"|") {
				t.Errorf("the ready entry after the replace: %q (was %q), want the same place with the new payload", e, entry)
			}
			if info, _ := confLookupIn(f.ctx, f.s, f.s.Layout(), f.sh, ready); info.State != "ready" || string(info.Task.Payload) != "new" {
				t.Errorf("lookup of the replaced ready task: %+v", info)
			}
		}},
	{script: "change.lua", also: []string{"move.lua", "pagefar.lua"}, name: "the far tier's entry made stale", states: []confState{stStable}, props: []confProp{pBehaviour, pCounts},
		run: func(t *testing.T, f *confFixture) {
			// Brought forward to now, the far task is moved and ready; its
			// bucket entry, promoted later, must not schedule it again.
			id := f.id["far"]
			before, _ := confLookupIn(f.ctx, f.s, f.s.Layout(), f.sh, id)
			if _, err := confChangeIn(f.ctx, f.s, f.sh, id, Change{SetDue: true, Due: f.now().Add(-time.Second)}); err != nil {
				t.Fatal(err)
			}
			if info, _ := confLookupIn(f.ctx, f.s, f.s.Layout(), f.sh, id); !info.Task.Enqueued.Equal(before.Task.Enqueued.Add(time.Millisecond)) {
				t.Errorf("enqueued %v after the task left the far tier, want 1 ms after %v", info.Task.Enqueued, before.Task.Enqueued)
			}
			if es, _, _, err := f.s.PageFar(f.ctx, f.sh, FarCursor{}, 100, ""); err != nil || len(es) != 0 {
				t.Errorf("the far tier lists %v, %v after the reschedule; want nothing", es, err)
			}
			if r, err := f.s.Move(f.ctx, f.sh, confEpoch, 100); err != nil || r.Moved < 1 {
				t.Fatalf("move: %+v, %v", r, err)
			}
			// The bucket is due now (a promotion time in the past).
			b := strings.TrimPrefix(f.farBucket(), f.l0.Far(f.sh)+":")
			f.rdb.ZAdd(f.ctx, f.l0.Far(f.sh), redis.Z{Score: 0, Member: b})
			f.rdb.ZAdd(f.ctx, f.l0.Delayed(f.sh), redis.Z{Score: 0, Member: FarSentinel})
			if r, err := f.s.Move(f.ctx, f.sh, confEpoch, 100); err != nil || r.Promoted != 1 {
				t.Errorf("promote: %+v, %v; want the entry taken", r, err)
			}
			if f.rdb.ZScore(f.ctx, f.l0.Delayed(f.sh), id).Err() != redis.Nil {
				t.Errorf("the stale entry put %s back in the delayed set: it would run twice", id)
			}
		}},
	{script: "change.lua", name: "ready task, its lists moved", states: onlySlot, props: []confProp{pBehaviour, pTryAgain, pCounts},
		run: func(t *testing.T, f *confFixture) {
			later := f.now().Add(time.Hour).Truncate(time.Millisecond)
			var r ChangeResult
			err := f.call([]string{"ready:q1"}, func() (err error) {
				r, err = confChangeIn(f.ctx, f.s, f.sh, f.id["ready"], Change{SetDue: true, Due: later})
				return err
			})
			if err != nil || r.State != "ready" || !r.Due.Equal(later) {
				t.Errorf("reschedule after the slot migration: %+v, %v", r, err)
			}
		}},
	{script: "change.lua", name: "a task on its way", states: onlyReshard, props: []confProp{pOutbox, pCounts},
		prepare: prepareMoving,
		run: func(t *testing.T, f *confFixture) {
			l := f.s.Layout()
			id := f.id["msched"]
			if _, err := f.s.Export(f.ctx, l, f.sh, confEpoch, time.Minute, []string{id}); err != nil {
				t.Fatal(err)
			}
			_, err := f.s.Change(f.ctx, id, Change{SetDue: true, Delay: time.Hour})
			wantErr(t, pOutbox, "reschedule of an outbox entry", err, ErrInTransit)
		}},

	// unique.lua: an enqueue that reserves its id beyond the task.
	{script: "unique.lua", also: []string{"enqueue.lua", "cancel.lua"}, name: "reserved after the task", states: []confState{stStable, stResharding}, props: []confProp{pBehaviour, pCounts},
		run: func(t *testing.T, f *confFixture) {
			id := f.newIDs(1, false)[0]
			a := []EnqueueArgs{{ID: id, Queue: "q1", Delay: time.Hour, MaxRetries: -1, UniqueFor: time.Hour}}
			if r, _ := confEnqueueIn(f.ctx, f.s, f.s.Layout(), a); r[0].Err != nil {
				t.Fatalf("enqueue: %v", r[0].Err)
			}
			if r, _ := confEnqueueIn(f.ctx, f.s, f.s.Layout(), a); !errors.Is(r[0].Err, ErrDuplicate) || r[0].State != "scheduled" {
				t.Errorf("again while live: %+v, want a duplicate of the scheduled task", r[0])
			}
			if _, err := confCancelIn(f.ctx, f.s, f.s.Layout(), f.sh, id); err != nil {
				t.Fatal(err)
			}
			if r, _ := confEnqueueIn(f.ctx, f.s, f.s.Layout(), a); !errors.Is(r[0].Err, ErrDuplicate) || r[0].State != "reserved" {
				t.Errorf("again after the task: %+v, want refused as reserved", r[0])
			}
			a[0].UniqueFor = 0
			if r, _ := confEnqueueIn(f.ctx, f.s, f.s.Layout(), a); r[0].Err != nil {
				t.Errorf("a plain enqueue of the reserved id: %v, want it stored", r[0].Err)
			}
		}},
	// debounce.lua: calls by a key of the caller's, in windows.
	{script: "debounce.lua", also: []string{"enqueue.lua", "change.lua"}, name: "modes", states: []confState{stStable, stRedirecting, stResharding}, props: []confProp{pBehaviour, pCounts},
		run: func(t *testing.T, f *confFixture) {
			keys := f.newIDs(4, false)
			call := func(key string, mode DebounceMode, delay, maxWait time.Duration, payload string) DebounceResult {
				t.Helper()
				r, err := f.s.Debounce(f.ctx, DebounceArgs{Key: key, Mode: mode, Delay: delay, MaxWait: maxWait, Queue: "q1", Payload: []byte(payload), MaxRetries: -1})
				if err != nil {
					t.Fatalf("debounce %s %s: %v", mode, payload, err)
				}
				if l := f.s.Layout(); l.ShardOf(r.ID) != l.ShardOf(key) && r.ID != "" {
					t.Errorf("debounce %s: task %s is not in its key's shard", mode, r.ID)
				}
				return r
			}
			payload := func(id string) string {
				t.Helper()
				info, err := f.s.Lookup(f.ctx, id)
				if err != nil {
					t.Fatalf("lookup %s: %v", id, err)
				}
				return string(info.Task.Payload)
			}
			// Trailing: the second call moves the first's task, never past
			// the first call + max wait.
			a := call(keys[0], DebounceTrailing, time.Hour, 30*time.Minute, "a1")
			b := call(keys[0], DebounceTrailing, time.Hour, 30*time.Minute, "a2")
			if a.Outcome != DebounceCreated || b.Outcome != DebounceChanged || b.ID != a.ID || !b.Due.Equal(a.Due) || b.Turn != 2 || payload(a.ID) != "a2" {
				t.Errorf("trailing: %+v then %+v (payload %q); want the task changed to a2, due capped at %v", a, b, payload(a.ID), a.Due)
			}
			// Leading: the first runs at once, the second is dropped.
			a = call(keys[1], DebounceLeading, time.Hour, 0, "b1")
			b = call(keys[1], DebounceLeading, time.Hour, 0, "b2")
			if a.Outcome != DebounceCreated || time.Until(a.Due) > time.Minute || b.Outcome != DebounceDropped || b.ID != a.ID || b.Turn != 2 {
				t.Errorf("leading: %+v then %+v; want the first due now, the second dropped", a, b)
			}
			// Leading and trailing: the dropped calls are one task at the
			// window's end, with the last payload.
			a = call(keys[2], DebounceLeadingTrailing, time.Hour, 0, "c1")
			b = call(keys[2], DebounceLeadingTrailing, time.Hour, 0, "c2")
			c := call(keys[2], DebounceLeadingTrailing, time.Hour, 0, "c3")
			if a.Outcome != DebounceCreated || b.Outcome != DebounceCreated || b.ID == a.ID || c.Outcome != DebounceChanged || c.ID != b.ID ||
				c.Due.Before(b.Due) || payload(b.ID) != "c3" || payload(a.ID) != "c1" {
				t.Errorf("leading+trailing: %+v, %+v, %+v; want a leading task and one trailing task with c3", a, b, c)
			}
			// Leading with a max wait below the delay: the window ends at
			// the max wait.
			mk := f.newIDs(1, false)[0]
			m1 := call(mk, DebounceLeading, time.Hour, time.Minute, "m1")
			m2 := call(mk, DebounceLeading, time.Hour, time.Minute, "m2")
			if m1.Outcome != DebounceCreated || m2.Outcome != DebounceDropped || m2.Due.After(m1.Due.Add(time.Minute)) {
				t.Errorf("leading with max wait 1m: %+v then %+v; want the window to end within a minute of the first call", m1, m2)
			}
			// Throttle: one task per window; its end does not move.
			a = call(keys[3], Throttle, time.Hour, 0, "d1")
			b = call(keys[3], Throttle, time.Hour, 0, "d2")
			if a.Outcome != DebounceCreated || b.Outcome != DebounceDropped || b.Due.After(a.Due.Add(time.Hour)) {
				t.Errorf("throttle: %+v then %+v", a, b)
			}
			_, err := f.s.Debounce(f.ctx, DebounceArgs{Key: "k|bad", Mode: Throttle, Delay: time.Second, Queue: "q1"})
			wantErr(t, pBehaviour, "a key with |", err, ErrInvalidArgument)
			_, err = f.s.Debounce(f.ctx, DebounceArgs{Key: f.newIDs(1, false)[0], Mode: Throttle, Delay: time.Second, Queue: "nosuch"})
			wantErr(t, pBehaviour, "an unknown queue", err, ErrUnknownQueue)
		}},
	{script: "debounce.lua", name: "a trailing window closes when its task is due", states: []confState{stStable}, props: []confProp{pBehaviour, pCounts},
		run: func(t *testing.T, f *confFixture) {
			key := f.newIDs(1, false)[0]
			a, err := f.s.Debounce(f.ctx, DebounceArgs{Key: key, Mode: DebounceTrailing, Delay: time.Millisecond, Queue: "q1", Payload: []byte("x"), MaxRetries: -1})
			if err != nil {
				t.Fatal(err)
			}
			testenv.WaitFor(t, 5*time.Second, "the task due", func() (bool, string) { return f.now().After(a.Due), "" })
			b, err := f.s.Debounce(f.ctx, DebounceArgs{Key: key, Mode: DebounceTrailing, Delay: time.Hour, Queue: "q1", Payload: []byte("y"), MaxRetries: -1})
			if err != nil || b.Outcome != DebounceCreated || b.ID == a.ID {
				t.Errorf("a call after the task is due: %+v, %v; want a new window", b, err)
			}
			if info, err := f.s.Lookup(f.ctx, a.ID); err != nil || string(info.Task.Payload) != "x" {
				t.Errorf("the first window's task: %+v, %v; want it as it was", info, err)
			}
		}},

	// Administration: deadops, depth, page, pagefar, pageready, registry, pause.
	{script: "deadops.lua", name: "replay", states: allStates, props: []confProp{pBehaviour, pCounts},
		run: func(t *testing.T, f *confFixture) {
			r, err := f.s.DeadPage(f.ctx, f.sh, Replay, time.Time{}, Cursor{}, 100, Filter{Reason: "max retries exhausted"})
			if err != nil || r.Acted != 0 || r.Examined != 1 || !r.Done {
				t.Errorf("replay of a filter no dead letter matches: %+v, %v", r, err)
			}
			at := f.now().Add(time.Hour).Truncate(time.Millisecond)
			if r, err = f.s.DeadPage(f.ctx, f.sh, Replay, at, Cursor{}, 100, Filter{Queue: "q1", Reason: "not retryable"}); err != nil || r.Acted != 1 {
				t.Errorf("replay: %+v, %v", r, err)
			}
			if info, err := confLookupIn(f.ctx, f.s, f.s.Layout(), f.sh, f.id["dead"]); err != nil || info.State != "scheduled" || !info.At.Equal(at) || info.Task.Attempts != 0 || info.DeadInfo != "" {
				t.Errorf("the replayed task: %+v, %v", info, err)
			}
		}},
	{script: "deadops.lua", name: "purge", states: allStates, props: []confProp{pBehaviour, pCounts},
		run: func(t *testing.T, f *confFixture) {
			noErr(t, "purge", f.s.DeadOne(f.ctx, Purge, f.id["dead"], time.Time{}))
			wantErr(t, pBehaviour, "a repeated purge", f.s.DeadOne(f.ctx, Purge, f.id["dead"], time.Time{}), ErrNotFound)
			if _, err := confLookupIn(f.ctx, f.s, f.s.Layout(), f.sh, f.id["dead"]); !errors.Is(err, ErrNotFound) {
				t.Errorf("the purged task: %v, want it gone", err)
			}
		}},
	{script: "deadops.lua", name: "replay, the delayed set moved", states: onlySlot, props: []confProp{pBehaviour, pTryAgain, pCounts},
		run: func(t *testing.T, f *confFixture) {
			err := f.call([]string{"delayed"}, func() error { return f.s.DeadOne(f.ctx, Replay, f.id["dead"], time.Time{}) })
			noErr(t, "replay after the slot migration", err)
		}},
	{script: "depth.lua", name: "counts per queue", states: allAndSlot, props: []confProp{pBehaviour, pTryAgain, pCounts},
		run: func(t *testing.T, f *confFixture) {
			var ds [][]QueueDepth
			err := f.call([]string{"ready:q1"}, func() (err error) {
				ds, err = f.s.Depth(f.ctx, []int{f.sh})
				return err
			})
			noErr(t, "depth", err)
			got := map[string]QueueDepth{}
			for _, d := range ds[0] {
				got[d.Queue] = d
			}
			if d := got["q1"]; !d.Registered || d.Scheduled != 2 || d.Ready != 1 || d.Leased != 2 || d.Popped != 1 || d.Dead != 1 {
				t.Errorf("depth of q1: %+v; want 2 scheduled, 1 ready, 2 leased, 1 popped, 1 dead", d)
			}
			if d := got["q2"]; d.Scheduled != 2 || d.Ready+d.Leased+d.Popped+d.Dead != 0 {
				t.Errorf("depth of q2: %+v; want 2 scheduled", d)
			}
		}},
	{script: "page.lua", name: "delayed and dead sets", states: allStates, props: []confProp{pBehaviour},
		run: func(t *testing.T, f *confFixture) {
			var ids []string
			cur := Cursor{}
			for pages := 0; ; pages++ {
				es, next, done, err := f.s.PageSet(f.ctx, f.sh, SetDelayed, cur, 1, Filter{})
				noErr(t, "page", err)
				for _, e := range es {
					ids = append(ids, e.ID)
				}
				if done || pages > 10 {
					break
				}
				cur = next
			}
			if want := []string{f.id["due"], f.id["sched"], f.id["retry"]}; !slices.Equal(ids, want) && !slices.Equal(ids, []string{want[0], want[2], want[1]}) {
				t.Errorf("delayed set pages: %v, want %v by due time (no far-tier member)", ids, want)
			}
			es, _, done, err := f.s.PageSet(f.ctx, f.sh, SetDead, Cursor{}, 10, Filter{Reason: "not retryable", Queue: "q1"})
			if err != nil || !done || len(es) != 1 || es[0].ID != f.id["dead"] || !strings.Contains(es[0].DeadInfo, "fatal") {
				t.Errorf("dead set page: %+v, %v, %v", es, done, err)
			}
		}},
	{script: "pagefar.lua", name: "far tier", states: allAndSlot, props: []confProp{pBehaviour, pTryAgain},
		run: func(t *testing.T, f *confFixture) {
			var es []Entry
			err := f.call([]string{"far:"}, func() (err error) {
				es, _, _, err = f.s.PageFar(f.ctx, f.sh, FarCursor{}, 100, "")
				return err
			})
			noErr(t, "far-tier page", err)
			if len(es) != 1 || es[0].ID != f.id["far"] {
				t.Errorf("far-tier page: %+v, want the far task alone", es)
			}
		}},
	{script: "pageready.lua", name: "a ready list", states: allStates, props: []confProp{pBehaviour},
		run: func(t *testing.T, f *confFixture) {
			es, _, done, err := f.s.PageReady(f.ctx, f.sh, "q1", ReadyCursor{}, 10)
			if err != nil || !done || len(es) != 1 || es[0].ID != f.id["ready"] || es[0].Blob == "" {
				t.Errorf("ready page: %+v, %v, %v; want the ready task alone", es, done, err)
			}
		}},
	{script: "page.lua", also: []string{"pagefar.lua", "pageready.lua"}, name: "payload previews", states: []confState{stStable, stResharding},
		props: []confProp{pBehaviour},
		prepare: func(f *confFixture) {
			ids := f.newIDs(3, false)
			for i, r := range []string{"bigsched", "bigfar", "bigready"} {
				f.id[r] = ids[i]
			}
			big := []byte(strings.Repeat("x", 1000))
			now := f.now()
			for i, a := range []EnqueueArgs{
				{ID: ids[0], Queue: "q1", Due: now.Add(time.Hour), MaxRetries: -1, Payload: big},
				{ID: ids[1], Queue: "q2", Due: f.farDue, MaxRetries: -1, Payload: big},
				{ID: ids[2], Queue: "q1", Due: now.Add(-time.Second), MaxRetries: -1, Payload: big},
			} {
				// The first goes to the delayed set: the far tier is off
				// while it is enqueued.
				tier := FarTier{Bucket: time.Minute, Lead: time.Second}
				if i == 0 {
					tier = FarTier{}
				}
				if err := f.s.SetFarTier(f.ctx, tier); err != nil {
					f.t.Fatal(err)
				}
				if r := f.s.Enqueue(f.ctx, a); r.Err != nil {
					f.t.Fatalf("seed: enqueue %s: %v", a.ID, r.Err)
				}
			}
			if r, err := f.s.Move(f.ctx, f.sh, confEpoch, 100); err != nil || r.Moved < 1 {
				f.t.Fatalf("seed: move: %+v, %v", r, err)
			}
		},
		run: func(t *testing.T, f *confFixture) {
			// Each listing returns the task's fields and PagePreview bytes
			// of its 1000-byte payload, and says how long the whole is.
			check := func(what, id string, es []Entry) {
				t.Helper()
				i := slices.IndexFunc(es, func(e Entry) bool { return e.ID == id })
				if i < 0 {
					t.Errorf("[%s] %s: %s not listed", pBehaviour, what, id)
					return
				}
				d, err := f.s.DecodeIn(f.sh, id, []byte(es[i].Blob))
				if err != nil || d.Queue == "" || len(d.Payload) != PagePreview || es[i].PayloadSize != 1000 {
					t.Errorf("[%s] %s: %s with %d payload bytes of %d (%v), want %d of 1000", pBehaviour, what, id, len(d.Payload), es[i].PayloadSize, err, PagePreview)
				}
			}
			es, _, _, err := f.s.PageSet(f.ctx, f.sh, SetDelayed, Cursor{}, 100, Filter{})
			noErr(t, "delayed page", err)
			check("delayed page", f.id["bigsched"], es)
			es, _, _, err = f.s.PageFar(f.ctx, f.sh, FarCursor{}, 100, "")
			noErr(t, "far-tier page", err)
			check("far-tier page", f.id["bigfar"], es)
			es, _, _, err = f.s.PageReady(f.ctx, f.sh, "q1", ReadyCursor{}, 100)
			noErr(t, "ready page", err)
			check("ready page", f.id["bigready"], es)
			if i := slices.IndexFunc(es, func(e Entry) bool { return e.ID == f.id["ready"] }); i < 0 || es[i].PayloadSize != int64(len("p-"+f.id["ready"])) {
				t.Errorf("[%s] ready page: a small payload's size: %+v", pBehaviour, es)
			}
		}},
	{script: "registry.lua", name: "set and remove a queue", states: allStates, props: []confProp{pBehaviour},
		run: func(t *testing.T, f *confFixture) {
			p := QueuePolicy{MaxRetries: 1, Timeout: time.Second, MaxPayload: 10}
			if isNew, err := f.s.SetQueue(f.ctx, "q3", p); err != nil || !isNew {
				t.Errorf("set a new queue: %v, %v", isNew, err)
			}
			if isNew, err := f.s.SetQueue(f.ctx, "q3", p); err != nil || isNew {
				t.Errorf("set it again: %v, %v", isNew, err)
			}
			noErr(t, "remove", f.s.RemoveQueue(f.ctx, "q3"))
			if reg, err := f.s.Registration(f.ctx, []string{"q3"}); err != nil || !reg.Removed["q3"] {
				t.Errorf("registration after the removal: %+v, %v", reg, err)
			}
			wantErr(t, pBehaviour, "remove an unknown queue", f.s.RemoveQueue(f.ctx, "q4"), ErrNotFound)
		}},
	{script: "pause.lua", name: "pause, resume, limit and unlimit", states: allStates, props: []confProp{pBehaviour},
		run: func(t *testing.T, f *confFixture) {
			for i, want := range []bool{true, false} {
				if changed, err := f.s.SetPaused(f.ctx, "q1", true); err != nil || changed != want {
					t.Errorf("pause %d: %v, %v", i, changed, err)
				}
			}
			if p, err := f.s.Paused(f.ctx); err != nil || len(p) != 1 {
				t.Errorf("paused: %v, %v", p, err)
			}
			if changed, err := f.s.SetPaused(f.ctx, "q1", false); err != nil || !changed {
				t.Errorf("resume: %v, %v", changed, err)
			}
			// Limits set at run time share the hash; Paused leaves them out.
			l := QueueLimits{Rate: 50, Burst: 10, Kind: "sliding_window"}
			if _, err := f.s.SetQueueLimits(f.ctx, "q1", &l); err == nil {
				t.Errorf("a burst with a window limiter was stored")
			}
			l.Burst = 0
			for i, want := range []bool{true, false} {
				if changed, err := f.s.SetQueueLimits(f.ctx, "q1", &l); err != nil || changed != want {
					t.Errorf("limit %d: %v, %v", i, changed, err)
				}
			}
			c, err := f.s.Controls(f.ctx)
			if err != nil || len(c.Paused) != 0 || c.Limits["q1"] != l {
				t.Errorf("controls: %+v, %v", c, err)
			}
			// Limits that do not validate (written by hand, or by a newer
			// release) are reported, not used.
			if err := f.rdb.HSet(f.ctx, f.s.k.Paused(), "|lim|q2", `{"rate":5,"kind":"gcra"}`).Err(); err != nil {
				t.Fatal(err)
			}
			if c, err := f.s.Controls(f.ctx); err != nil || c.BadLimits["q2"] == nil || len(c.Limits) != 1 {
				t.Errorf("controls with bad limits: %+v, %v", c, err)
			}
			f.rdb.HDel(f.ctx, f.s.k.Paused(), "|lim|q2")
			if changed, err := f.s.SetQueueLimits(f.ctx, "q1", nil); err != nil || !changed {
				t.Errorf("unlimit: %v, %v", changed, err)
			}
			if c, err := f.s.Controls(f.ctx); err != nil || len(c.Limits) != 0 {
				t.Errorf("limits after unlimit: %+v, %v", c.Limits, err)
			}
		}},

	// fairrefill.lua and move.lua's fair path: a fair queue's window is
	// filled in turns between the keys of its tasks' ids.
	{script: "fairrefill.lua", also: []string{"move.lua"}, name: "a fair queue's window in turns between keys", states: []confState{stStable, stRedirecting, stResharding}, props: []confProp{pBehaviour},
		run: func(t *testing.T, f *confFixture) {
			p := QueuePolicy{MaxRetries: 1, Timeout: time.Second, MaxPayload: 100, FairWindow: 2}
			noErr(t, "register a fair queue", f.s.RegisterQueues(f.ctx, map[string]QueuePolicy{"qf": p}))
			here := func(id string) bool {
				return testenv.ShardOf(id, confShards) == confShard && testenv.ShardOf(id, confGrown) == confShard
			}
			f.next++
			a := testenv.IDs("{a}"+strconv.Itoa(f.next)+"-", 3, here)
			b := testenv.IDs("{b}"+strconv.Itoa(f.next)+"-", 1, here)
			slices.Sort(a) // tasks due at one time move in id order
			now := f.now()
			f.enqueue(f.s, "qf", now.Add(-2*time.Second), a...)
			f.enqueue(f.s, "qf", now.Add(-time.Second), b...)
			if r, err := f.s.Move(f.ctx, f.sh, confEpoch, 100); err != nil || r.Moved != 5 { // and the seeded due task
				t.Fatalf("move: %+v, %v", r, err)
			}
			take := func() []string { return popIDs(t, f.rdb, f.s.k.Ready(f.sh, "qf")) }
			if got, want := take(), []string{a[0], b[0]}; !slices.Equal(got, want) {
				t.Errorf("[%s] window after the move %v, want %v", pBehaviour, got, want)
			}
			if n, err := f.s.FairRefill(f.ctx, f.sh, "qf"); err != nil || n != 2 {
				t.Errorf("[%s] refill: %d, %v", pBehaviour, n, err)
			}
			if got, want := take(), a[1:]; !slices.Equal(got, want) {
				t.Errorf("[%s] window after the refill %v, want %v", pBehaviour, got, want)
			}
			if n, err := f.s.FairRefill(f.ctx, f.sh, "qf"); err != nil || n != 0 {
				t.Errorf("[%s] refill with nothing waiting: %d, %v", pBehaviour, n, err)
			}
			// The popped tasks are the worker's: acked, they leave.
			for _, id := range append(a, b...) {
				if _, err := f.s.Cancel(f.ctx, id); err != nil {
					t.Errorf("cancel %s: %v", id, err)
				}
			}
		}},

	// queuehist.lua: a process adds its minutes to the queue history,
	// whose keys are the namespace's ({ns}), not a shard's.
	{script: "queuehist.lua", name: "minutes add up", states: allStates, props: []confProp{pBehaviour},
		run: func(t *testing.T, f *confFixture) {
			at := time.Now().Truncate(time.Minute)
			var m Minute
			m.Counts[HistStarted], m.Late[LateBucket(3*time.Millisecond)], m.Oldest = 2, 2, 9
			for range 2 {
				if err := f.s.AddQueueHistory(f.ctx, []QueueMinute{{Queue: "q1", At: at, Minute: m}}); err != nil {
					t.Fatalf("add: %v", err)
				}
			}
			got, err := f.s.QueueHistory(f.ctx, "q1", at, at)
			if err != nil || len(got) != 1 || got[0].Counts[HistStarted] != 4 || got[0].Late[LateBucket(3*time.Millisecond)] != 4 || got[0].Oldest != 9 {
				t.Errorf("[%s] read back %+v, %v; want 4 starts, 4 in their bucket, oldest 9 s", pBehaviour, got, err)
			}
		}},

	// time.lua: a worker reads the clock of a shard's server.
	{script: "time.lua", name: "the shard's server's clock", states: allAndSlot, props: []confProp{pBehaviour},
		run: func(t *testing.T, f *confFixture) {
			// During a slot migration, once the shard's keys moved: ASK
			// routes the read to the slot's new node.
			var r ClockReading
			if err := f.callAsk(func() (err error) { r, err = f.s.ReadClock(f.ctx, f.sh, time.Now); return err }); err != nil {
				t.Fatalf("read the clock: %v", err)
			}
			// One host: the server's clock lies within the round trip,
			// give or take a millisecond of TIME's and Go's rounding.
			if r.Redis.Before(r.Sent.Add(-time.Millisecond)) || r.Redis.After(r.Received.Add(time.Millisecond)) {
				t.Errorf("Redis's clock %s outside the call [%s, %s]", r.Redis, r.Sent, r.Received)
			}
		}},

	// popnode.lua: a worker's pop on a Redis Cluster node.
	{script: "popnode.lua", name: "first non-empty list", states: allStates, props: []confProp{pBehaviour, pCounts},
		run: func(t *testing.T, f *confFixture) {
			r, err := f.s.PopNode(f.ctx, []string{f.l0.Ready(f.sh, "q2"), f.l0.Ready(f.sh, "q1")}, 10)
			if err != nil || r.Key != f.l0.Ready(f.sh, "q1") || len(r.Entries) != 1 || len(r.NonLocal)+len(r.Failed) != 0 {
				t.Fatalf("pop: %+v, %v; want the ready task's entry", r, err)
			}
			if d, ok := f.s.Popped(f.sh, r.Entries[0], time.Now(), 0); !ok || d.Task.ID != f.id["ready"] {
				t.Errorf("popped %q, want the ready task", r.Entries[0])
			}
		}},

	// scanids, export, import, commit, unimport: a change of the shard count.
	{script: "scanids.lua", name: "every id of the shard", states: allStates, props: []confProp{pBehaviour},
		run: func(t *testing.T, f *confFixture) {
			var got []string
			for cursor := uint64(0); ; {
				ids, next, err := f.s.ScanIDs(f.ctx, f.sh, cursor, 3)
				noErr(t, "scan", err)
				got = append(got, ids...)
				if next == 0 {
					break
				}
				cursor = next
			}
			var want []string
			for _, r := range confRoles {
				want = append(want, f.id[r])
			}
			sort.Strings(got)
			sort.Strings(want)
			if !slices.Equal(got, want) {
				t.Errorf("scan: %v, want %v", got, want)
			}
		}},
	{script: "export.lua", also: []string{"import.lua", "commit.lua"}, name: "export, import, commit", states: onlyReshard, props: []confProp{pBehaviour, pOutbox, pCounts},
		prepare: prepareMoving,
		run: func(t *testing.T, f *confFixture) {
			l := f.s.Layout()
			moving := []string{f.id["msched"], f.id["msoon"], f.id["mready"], f.id["mdead"], f.id["mfar"], "gone"}
			before := map[string]Info{}
			for _, id := range moving[:5] {
				before[id], _ = confLookupIn(f.ctx, f.s, l, f.sh, id)
			}
			r, err := f.s.Export(f.ctx, l, f.sh, confEpoch, time.Minute, moving)
			noErr(t, "export", err)
			want := []string{f.id["msched"], f.id["mdead"], f.id["mfar"]}
			var got []string
			for _, e := range r.Tasks {
				got = append(got, e.ID)
			}
			if sort.Strings(got); !slices.Equal(got, slices.Sorted(slices.Values(want))) || r.Stayed != 2 || r.Gone != 1 {
				t.Fatalf("export: %v stayed %d gone %d; want %v, 2 stayed, 1 gone", got, r.Stayed, r.Gone, want)
			}
			if n := f.rdb.HLen(f.ctx, f.l0.Outbox(f.sh)).Val(); n != 3 {
				t.Errorf("[%s] outbox holds %d entries, want 3", pOutbox, n)
			}
			n, err := f.s.Import(f.ctx, l, confNewShard, r.Tasks)
			if err != nil || n != 3 {
				t.Fatalf("import: %d, %v", n, err)
			}
			if n, err := f.s.Import(f.ctx, l, confNewShard, r.Tasks); err != nil || n != 0 {
				t.Errorf("a repeated import stored %d, %v; want none", n, err)
			}
			if c, err := f.s.Commit(f.ctx, f.sh, confEpoch, want); err != nil || len(c) != 0 {
				t.Errorf("commit: %v, %v", c, err)
			}
			if n := f.rdb.Exists(f.ctx, f.l0.Outbox(f.sh)).Val(); n != 0 {
				t.Errorf("[%s] the outbox is still there after the commit", pOutbox)
			}
			for _, id := range want {
				info, err := confLookupIn(f.ctx, f.s, l, confNewShard, id)
				if err != nil || info.State != before[id].State || !info.At.Equal(before[id].At) || info.LastError != before[id].LastError || info.DeadInfo != before[id].DeadInfo {
					t.Errorf("%s in its new shard: %+v, %v; want as before %+v", id, info, err, before[id])
				}
			}
		}},
	{script: "export.lua", also: []string{"import.lua", "commit.lua", "unimport.lua"}, name: "a dead letter without data moves", states: onlyReshard, props: []confProp{pBehaviour, pOutbox, pCounts},
		run: func(t *testing.T, f *confFixture) {
			// The mover buries delayed-set members whose data is gone; they
			// leave as dead letters, burial record and last error kept, and
			// one cancelled on its way is removed from its new shard.
			l := f.s.Layout()
			ids := f.newIDs(3, true)
			for _, id := range ids {
				noErr(t, "seed", f.rdb.ZAdd(f.ctx, f.l0.Delayed(f.sh), redis.Z{Score: 1, Member: id}).Err())
			}
			if _, err := f.s.Move(f.ctx, f.sh, confEpoch, 100); err != nil {
				t.Fatal(err)
			}
			noErr(t, "seed", f.rdb.HSet(f.ctx, f.l0.Errors(f.sh), ids[0], "last words").Err())
			before := map[string]Info{}
			for _, id := range ids {
				info, err := confLookupIn(f.ctx, f.s, l, f.sh, id)
				if err != nil || info.State != "dead" || !strings.Contains(info.DeadInfo, "no task data") {
					t.Fatalf("%s: %+v, %v; want a dead letter without data", id, info, err)
				}
				before[id] = info
			}
			r, err := f.s.Export(f.ctx, l, f.sh, confEpoch, time.Minute, ids)
			if err != nil || len(r.Tasks) != 3 {
				t.Fatalf("export: %+v, %v; want the 3 dead letters", r, err)
			}
			if info, err := confLookupIn(f.ctx, f.s, l, f.sh, ids[0]); err != nil || info.State != "dead" || info.DeadInfo != before[ids[0]].DeadInfo {
				t.Errorf("[%s] %s in the outbox: %+v, %v", pOutbox, ids[0], info, err)
			}
			if _, err := confCancelIn(f.ctx, f.s, l, f.sh, ids[2]); err != nil {
				t.Fatal(err)
			}
			if n, err := f.s.Import(f.ctx, l, confNewShard, r.Tasks); err != nil || n != 3 {
				t.Fatalf("import: %d, %v", n, err)
			}
			if n, err := f.s.Import(f.ctx, l, confNewShard, r.Tasks); err != nil || n != 0 {
				t.Errorf("a repeated import stored %d, %v; want none", n, err)
			}
			cancelled, err := f.s.Commit(f.ctx, f.sh, confEpoch, ids)
			if err != nil || !slices.Equal(cancelled, ids[2:]) {
				t.Fatalf("commit: %v, %v; want %v cancelled", cancelled, err, ids[2:])
			}
			entries, err := f.s.CancelledOnTheWay(f.ctx, f.sh)
			noErr(t, "cancelled entries", err)
			noErr(t, "unimport", f.s.Unimport(f.ctx, l, confNewShard, entries))
			noErr(t, "forget", f.s.Forget(f.ctx, f.sh, cancelled))
			for _, id := range ids[:2] {
				info, err := confLookupIn(f.ctx, f.s, l, confNewShard, id)
				if b := before[id]; err != nil || info.State != "dead" || !info.At.Equal(b.At) || info.DeadInfo != b.DeadInfo || info.LastError != b.LastError {
					t.Errorf("%s in its new shard: %+v, %v; want as before %+v", id, info, err, b)
				}
				if f.rdb.HExists(f.ctx, f.l0.Tasks(confNewShard), id).Val() {
					t.Errorf("%s has data in its new shard, it had none", id)
				}
			}
			for _, sh := range []int{f.sh, confNewShard} {
				if _, err := confLookupIn(f.ctx, f.s, l, sh, ids[2]); !errors.Is(err, ErrNotFound) {
					t.Errorf("%s, cancelled on its way, in shard %d: %v, want it gone", ids[2], sh, err)
				}
			}
		}},
	{script: "import.lua", name: "a dead letter without data does not shadow a task", states: onlyReshard, props: []confProp{pBehaviour, pCounts},
		run: func(t *testing.T, f *confFixture) {
			// Its id was enqueued again meanwhile (a dead letter without
			// data does not make the id live), into its new shard: the
			// dead letter, which holds only an id and a reason, is dropped
			// rather than make that task look dead.
			l := f.s.Layout()
			id := f.newIDs(1, true)[0]
			noErr(t, "seed", f.rdb.ZAdd(f.ctx, f.l0.Delayed(f.sh), redis.Z{Score: 1, Member: id}).Err())
			if _, err := f.s.Move(f.ctx, f.sh, confEpoch, 100); err != nil {
				t.Fatal(err)
			}
			f.enqueue(f.s, "q2", f.now().Add(time.Hour), id) // no data in the old shard: stored in the new one
			r, err := f.s.Export(f.ctx, l, f.sh, confEpoch, time.Minute, []string{id})
			if err != nil || len(r.Tasks) != 1 {
				t.Fatalf("export: %+v, %v", r, err)
			}
			if n, err := f.s.Import(f.ctx, l, confNewShard, r.Tasks); err != nil || n != 0 {
				t.Errorf("import: %d, %v; want it skipped", n, err)
			}
			if _, err := f.s.Commit(f.ctx, f.sh, confEpoch, []string{id}); err != nil {
				t.Fatal(err)
			}
			if info, err := confLookupIn(f.ctx, f.s, l, confNewShard, id); err != nil || info.State != "scheduled" || string(info.Task.Payload) != "p-"+id {
				t.Errorf("the task in the new shard: %+v, %v; want it scheduled as enqueued", info, err)
			}
		}},
	{script: "exportready.lua", also: []string{"import.lua", "commit.lua"}, name: "a ready task nobody takes moves", states: onlyReshard, props: []confProp{pBehaviour, pOutbox, pCounts},
		prepare: prepareMoving,
		run: func(t *testing.T, f *confFixture) {
			l := f.s.Layout()
			win, err := f.s.ReadyWindow(f.ctx, f.sh, "q1", 0, 100)
			noErr(t, "read the ready list", err)
			var take []ReadyEntry
			for _, e := range win {
				if e.ID == f.id["mready"] {
					take = append(take, e)
				}
			}
			if len(take) != 1 || take[0].Due.IsZero() {
				t.Fatalf("ready window %+v: want mready's entry with its due time", win)
			}
			moved := take[0]
			moved.Index++ // not where it was read: left
			if out, err := f.s.ExportReady(f.ctx, l, f.sh, confEpoch, "q1", []ReadyEntry{moved}); err != nil || len(out) != 0 {
				t.Errorf("an entry read elsewhere: %v, %v; want it left", out, err)
			}
			n0 := f.rdb.LLen(f.ctx, f.l0.Ready(f.sh, "q1")).Val()
			out, err := f.s.ExportReady(f.ctx, l, f.sh, confEpoch, "q1", take)
			if err != nil || len(out) != 1 {
				t.Fatalf("export ready: %v, %v", out, err)
			}
			if n := f.rdb.LLen(f.ctx, f.l0.Ready(f.sh, "q1")).Val(); n != n0-1 {
				t.Errorf("the ready list holds %d entries, want %d", n, n0-1)
			}
			if f.rdb.ZScore(f.ctx, f.l0.Pending(f.sh, "q1"), f.id["mready"]).Err() == nil {
				t.Errorf("mready is still pending in its old shard")
			}
			if info, err := confLookupIn(f.ctx, f.s, l, f.sh, f.id["mready"]); err != nil || info.State != "scheduled" {
				t.Errorf("[%s] mready in the outbox: %+v, %v", pOutbox, info, err)
			}
			if n, err := f.s.Import(f.ctx, l, confNewShard, out); err != nil || n != 1 {
				t.Fatalf("import: %d, %v", n, err)
			}
			if c, err := f.s.Commit(f.ctx, f.sh, confEpoch, []string{f.id["mready"]}); err != nil || len(c) != 0 {
				t.Errorf("commit: %v, %v", c, err)
			}
			info, err := confLookupIn(f.ctx, f.s, l, confNewShard, f.id["mready"])
			if err != nil || info.State != "scheduled" || string(info.Task.Payload) != "p-"+f.id["mready"] || info.At.After(time.Now()) {
				t.Errorf("mready in its new shard: %+v, %v; want scheduled, due already", info, err)
			}
			if out, err := f.s.ExportReady(f.ctx, l, f.sh, confEpoch, "q1", take); err != nil || len(out) != 0 {
				t.Errorf("a repeated export: %v, %v; want nothing", out, err)
			}
		}},
	{script: "exportready.lua", name: "stale owner", states: onlyReshard, props: []confProp{pFence},
		prepare: prepareMoving,
		run: func(t *testing.T, f *confFixture) {
			win, err := f.s.ReadyWindow(f.ctx, f.sh, "q1", 0, 100)
			noErr(t, "read the ready list", err)
			f.fenced("export ready", func() error {
				_, err := f.s.ExportReady(f.ctx, f.s.Layout(), f.sh, confEpoch-1, "q1", win)
				return err
			})
		}},
	{script: "export.lua", name: "stale owner", states: onlyReshard, props: []confProp{pFence},
		prepare: prepareMoving,
		run: func(t *testing.T, f *confFixture) {
			f.fenced("export", func() error {
				_, err := f.s.Export(f.ctx, f.s.Layout(), f.sh, confEpoch-1, time.Minute, []string{f.id["msched"]})
				return err
			})
		}},
	{script: "export.lua", name: "stale marker", states: allStates, props: []confProp{pLayout},
		run: func(t *testing.T, f *confFixture) {
			before := f.snapshot()
			_, err := f.s.Export(f.ctx, stalerLayout(t, f), f.sh, confEpoch, time.Minute, []string{f.id["sched"]})
			wantErr(t, pLayout, "export for another change", err, ErrStaleLayout)
			f.unchanged(pLayout, "export for another change", before)
		}},
	{script: "export.lua", name: "pending set moved", states: onlySlot, props: []confProp{pBehaviour, pTryAgain, pCounts},
		run: func(t *testing.T, f *confFixture) {
			declare(t, f, f.l0.Outbox(f.sh))
			var r ExportResult
			err := f.call([]string{"pending:q1"}, func() (err error) {
				r, err = f.s.Export(f.ctx, f.l0, f.sh, confEpoch, time.Minute, []string{f.id["ready"]})
				return err
			})
			if err != nil || r.Stayed != 1 {
				t.Errorf("export after the slot migration: %+v, %v; want the ready task to stay", r, err)
			}
		}},
	{script: "import.lua", name: "stale marker", states: allStates, props: []confProp{pLayout},
		run: func(t *testing.T, f *confFixture) {
			before := f.snapshot()
			_, err := f.s.Import(f.ctx, stalerLayout(t, f), confNewShard, []Exported{{ID: "x", Entry: "not read"}})
			wantErr(t, pLayout, "import for another change", err, ErrStaleLayout)
			f.unchanged(pLayout, "import for another change", before)
		}},
	{script: "import.lua", name: "far bucket moved", states: onlySlot, props: []confProp{pBehaviour, pTryAgain, pCounts},
		run: func(t *testing.T, f *confFixture) {
			// The far task leaves the shard (generation 0's marker is the
			// stable one) and comes back into its bucket.
			r, err := f.s.Export(f.ctx, f.l0, f.sh, confEpoch, time.Minute, []string{f.id["far"]})
			if err != nil || len(r.Tasks) != 1 {
				t.Fatalf("export: %+v, %v", r, err)
			}
			declare(t, f, f.l0.Imported(f.sh, 0))
			var n int
			err = f.call([]string{"far:"}, func() (err error) {
				n, err = f.s.Import(f.ctx, f.l0, f.sh, r.Tasks)
				return err
			})
			if err != nil || n != 1 {
				t.Errorf("import after the slot migration: %d, %v", n, err)
			}
			if _, err := f.s.Commit(f.ctx, f.sh, confEpoch, []string{f.id["far"]}); err != nil {
				t.Fatal(err)
			}
		}},
	{script: "commit.lua", name: "stale owner", states: allStates, props: []confProp{pFence},
		run: func(t *testing.T, f *confFixture) {
			f.fenced("commit", func() error { _, err := f.s.Commit(f.ctx, f.sh, confEpoch-1, []string{f.id["sched"]}); return err })
		}},
	{script: "unimport.lua", name: "a copy cancelled on its way", states: onlyReshard, props: []confProp{pBehaviour, pOutbox, pCounts},
		prepare: prepareMoving,
		run: func(t *testing.T, f *confFixture) {
			l := f.s.Layout()
			ids := []string{f.id["msched"], f.id["mdead"], f.id["mfar"]}
			r, err := f.s.Export(f.ctx, l, f.sh, confEpoch, time.Minute, ids)
			if err != nil || len(r.Tasks) != 3 {
				t.Fatalf("export: %+v, %v", r, err)
			}
			for _, id := range ids {
				if _, err := confCancelIn(f.ctx, f.s, l, f.sh, id); err != nil {
					t.Fatal(err)
				}
			}
			if n, err := f.s.Import(f.ctx, l, confNewShard, r.Tasks); err != nil || n != 3 {
				t.Fatalf("import: %d, %v", n, err)
			}
			cancelled, err := f.s.Commit(f.ctx, f.sh, confEpoch, ids)
			if err != nil || len(cancelled) != 3 {
				t.Fatalf("[%s] commit: %v, %v; want all three cancelled", pOutbox, cancelled, err)
			}
			entries, err := f.s.CancelledOnTheWay(f.ctx, f.sh)
			noErr(t, "cancelled entries", err)
			noErr(t, "unimport", f.s.Unimport(f.ctx, l, confNewShard, entries))
			noErr(t, "forget", f.s.Forget(f.ctx, f.sh, cancelled))
			for _, id := range ids {
				for _, sh := range []int{f.sh, confNewShard} {
					if _, err := confLookupIn(f.ctx, f.s, l, sh, id); !errors.Is(err, ErrNotFound) {
						t.Errorf("%s in shard %d after its cancel: %v, want it gone", id, sh, err)
					}
				}
			}
			if n := f.rdb.Exists(f.ctx, f.l0.Cancelled(f.sh), f.l0.Outbox(f.sh)).Val(); n != 0 {
				t.Errorf("[%s] the outbox or cancelled hash is left", pOutbox)
			}
		}},

	{script: "unimport.lua", also: []string{"import.lua"}, name: "a late import after the cancelled entries were forgotten", states: onlyReshard, props: []confProp{pBehaviour, pOutbox, pCounts},
		prepare: prepareMoving,
		run: func(t *testing.T, f *confFixture) {
			// An owner exports a batch and is paused before its import;
			// the tasks are cancelled on their way; the next owner finds
			// no imported copy to remove and forgets the entries. Then the
			// paused owner's import arrives: it must store nothing.
			l := f.s.Layout()
			ids := []string{f.id["msched"], f.id["mdead"], f.id["mfar"]}
			r, err := f.s.Export(f.ctx, l, f.sh, confEpoch, time.Minute, ids)
			if err != nil || len(r.Tasks) != 3 {
				t.Fatalf("export: %+v, %v", r, err)
			}
			for _, id := range ids {
				if _, err := confCancelIn(f.ctx, f.s, l, f.sh, id); err != nil {
					t.Fatal(err)
				}
			}
			entries, err := f.s.CancelledOnTheWay(f.ctx, f.sh)
			if err != nil || len(entries) != 3 {
				t.Fatalf("[%s] cancelled entries: %v, %v; want 3", pOutbox, entries, err)
			}
			noErr(t, "unimport", f.s.Unimport(f.ctx, l, confNewShard, entries))
			noErr(t, "forget", f.s.Forget(f.ctx, f.sh, ids))
			if n, err := f.s.Import(f.ctx, l, confNewShard, r.Tasks); err != nil || n != 0 {
				t.Errorf("[%s] the late import stored %d, %v; want none", pOutbox, n, err)
			}
			for _, id := range ids {
				if _, err := confLookupIn(f.ctx, f.s, l, confNewShard, id); !errors.Is(err, ErrNotFound) {
					t.Errorf("%s, cancelled on its way, in its new shard after the late import: %v, want it gone", id, err)
				}
			}
		}},

	{script: "unimport.lua", name: "pending set moved", states: onlySlot, props: []confProp{pBehaviour, pTryAgain, pCounts},
		run: func(t *testing.T, f *confFixture) {
			// The retried task leaves the shard and comes back (generation
			// 0's marker is the stable one), as an import does.
			id := f.id["retry"]
			r, err := f.s.Export(f.ctx, f.l0, f.sh, confEpoch, time.Minute, []string{id})
			if err != nil || len(r.Tasks) != 1 {
				t.Fatalf("export: %+v, %v", r, err)
			}
			if n, err := f.s.Import(f.ctx, f.l0, f.sh, r.Tasks); err != nil || n != 1 {
				t.Fatalf("import: %d, %v", n, err)
			}
			if _, err := f.s.Commit(f.ctx, f.sh, confEpoch, []string{id}); err != nil {
				t.Fatal(err)
			}
			err = f.call([]string{"pending:q1"}, func() error { return f.s.Unimport(f.ctx, f.l0, f.sh, r.Tasks) })
			noErr(t, "unimport after the slot migration", err)
			if _, err := confLookupIn(f.ctx, f.s, f.l0, f.sh, id); !errors.Is(err, ErrNotFound) {
				t.Errorf("the unimported task: %v, want it gone", err)
			}
		}},

	// layout.lua: the layout record's compare-and-set.
	{script: "layout.lua", name: "a change from start to end", states: allStates, props: []confProp{pBehaviour, pLayout},
		run: func(t *testing.T, f *confFixture) {
			l := f.s.Layout()
			if f.state != stStable {
				_, err := f.s.BeginResize(f.ctx, 6)
				wantErr(t, pLayout, "a second change", err, ErrResizeRunning)
			}
			if f.state != stResharding {
				var err error
				l, err = f.s.BeginResize(f.ctx, confGrown) // starts it, or finishes setting it up
				noErr(t, "begin", err)
			}
			if l.Gen() != 1 || l.Shards() != confGrown || l.From() != confShards {
				t.Fatalf("the change: %+v", l)
			}
			for sh := range confGrown {
				if m := f.marker(sh); m != "1|8|4" {
					t.Errorf("[%s] marker of shard %d: %q, want 1|8|4", pLayout, sh, m)
				}
			}
			noErr(t, "moved", f.s.AddMoved(f.ctx, l, 3))
			for sh := range confGrown {
				ended, err := f.s.ShardDone(f.ctx, l, sh)
				if err != nil || ended != (sh == confGrown-1) {
					t.Errorf("shard %d done: ended %v, %v", sh, ended, err)
				}
			}
			r, err := f.s.ReadLayout(f.ctx)
			if err != nil || r.State != LayoutStable || r.Gen != 1 || r.Shards != confGrown || r.Moved != 3 {
				t.Errorf("record after the change: %+v, %v", r, err)
			}
			for sh := range confGrown {
				if m := f.marker(sh); m != "1|8|0" {
					t.Errorf("[%s] marker of shard %d after the change: %q, want 1|8|0", pLayout, sh, m)
				}
			}
		}},

	// Periodic schedules changing home: handoff.lua and adopt.lua.
	{script: "handoff.lua", name: "hand a schedule over", states: allStates, props: []confProp{pBehaviour, pLayout, pFence},
		run: func(t *testing.T, f *confFixture) {
			name := confSchedule("hand")
			l := f.s.Layout()
			occ := f.now().Add(time.Minute).Truncate(time.Millisecond)
			id := l.OccurrenceID(name, occ)
			if r, err := f.s.Fire(f.ctx, f.sh, FireArgs{Schedule: name, Occurrence: occ, Epoch: confEpoch, Task: EnqueueArgs{ID: id, Queue: "q1", Due: occ, MaxRetries: -1}}); err != nil || r.Outcome != Fired {
				t.Fatalf("fire: %+v, %v", r, err)
			}
			f.fenced("hand over", func() error { _, err := f.s.HandOff(f.ctx, l, f.sh, confEpoch-1, []string{name}); return err })
			before := f.snapshot()
			_, err := f.s.HandOff(f.ctx, stalerLayout(t, f), f.sh, confEpoch, []string{name})
			wantErr(t, pLayout, "hand over for another change", err, ErrStaleLayout)
			f.unchanged(pLayout, "hand over for another change", before)
			st, err := f.s.HandOff(f.ctx, l, f.sh, confEpoch, []string{name})
			if f.state == stSealed || f.state == stRedirecting {
				// The store is still on generation 0: out of date.
				wantErr(t, pLayout, "hand over on generation 0", err, ErrStaleLayout)
				f.unchanged(pLayout, "hand over on generation 0", before)
				return
			}
			if err != nil || !st[name].Moved || !st[name].Last.Equal(occ) || st[name].LastTask != id {
				t.Fatalf("hand over: %+v, %v", st, err)
			}
			next := occ.Add(time.Second)
			r, err := f.s.Fire(f.ctx, f.sh, FireArgs{Schedule: name, Occurrence: next, Epoch: confEpoch, Task: EnqueueArgs{ID: l.OccurrenceID(name, next), Queue: "q1", Due: next, MaxRetries: -1}})
			if err != nil || r.Outcome != HandedOver {
				t.Errorf("fire after the hand-over: %+v, %v; want handed over", r, err)
			}
		}},
	{script: "adopt.lua", name: "the later occurrence wins", states: allStates, props: []confProp{pBehaviour},
		run: func(t *testing.T, f *confFixture) {
			at := func(s int) time.Time { return time.UnixMilli(1_900_000_000_000 + int64(s)*1000) }
			noErr(t, "adopt", f.s.Adopt(f.ctx, f.sh, map[string]ScheduleState{"a": {Last: at(5), LastTask: "a@5"}, "b": {}}))
			noErr(t, "adopt an earlier one", f.s.Adopt(f.ctx, f.sh, map[string]ScheduleState{"a": {Last: at(4), LastTask: "a@4"}}))
			if err := f.rdb.HSet(f.ctx, f.l0.Periodic(f.sh), "c", "moved:0").Err(); err != nil {
				t.Fatal(err)
			}
			noErr(t, "adopt over a hand-over mark", f.s.Adopt(f.ctx, f.sh, map[string]ScheduleState{"c": {}}))
			st, err := f.s.PeriodicState(f.ctx, f.sh)
			if err != nil || !st["a"].Last.Equal(at(5)) || st["a"].LastTask != "a@5" || len(st) != 1 {
				t.Errorf("schedules after adopting: %+v, %v; want a at 5 s alone", st, err)
			}
		}},
}

// TestScriptConformance runs every case in each of its states on every
// topology that has the state.
func TestScriptConformance(t *testing.T) {
	t.Parallel()
	for _, top := range []struct {
		name  string
		start func(*testing.T) *confTopology
	}{{"standalone", startStandalone}, {"sentinel", startSentinel}, {"cluster", startCluster}} {
		t.Run(top.name, func(t *testing.T) {
			t.Parallel()
			tp := top.start(t)
			for _, c := range conformanceCases {
				for _, st := range c.states {
					if st == stSlotMigrating && !tp.cluster {
						continue
					}
					t.Run(strings.TrimSuffix(c.script, ".lua")+"/"+string(st)+"/"+c.name, func(t *testing.T) {
						t.Parallel()
						f := newConfFixture(t, tp, st, c.prepare)
						c.run(t, f)
					})
				}
			}
		})
	}
}

// confColumns are the matrix's columns: topologies in the stable state,
// then the cluster's slot migration, then the states of a change of the
// shard count (each run on every topology).
var confColumns = []struct {
	title string
	state confState
}{
	{"standalone", stStable}, {"Sentinel", stStable}, {"Cluster", stStable},
	{"Cluster, slot migrating", stSlotMigrating},
	{"sealed", stSealed}, {"redirecting", stRedirecting}, {"resharding", stResharding},
}

// conformanceMatrix renders the scripts × states × properties the cases
// check, as a Markdown table.
func conformanceMatrix(scripts []string) string {
	var b strings.Builder
	b.WriteString("| script |")
	for _, c := range confColumns {
		b.WriteString(" " + c.title + " |")
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(confColumns)) + "\n")
	for _, s := range scripts {
		b.WriteString("| `" + s + "` |")
		for _, col := range confColumns {
			props := map[confProp]bool{}
			for _, c := range conformanceCases {
				if (c.script == s || slices.Contains(c.also, s)) && slices.Contains(c.states, col.state) {
					for _, p := range c.props {
						// TRYAGAIN is what call checks during a slot
						// migration; elsewhere it calls once.
						props[p] = p != pTryAgain || col.state == stSlotMigrating
					}
				}
			}
			var cell []string
			for _, p := range []confProp{pBehaviour, pFence, pTryAgain, pLayout, pOutbox, pCounts} {
				if props[p] {
					cell = append(cell, string(p))
				}
			}
			b.WriteString(" " + strings.Join(cell, " ") + " |")
		}
		b.WriteString("\n")
	}
	return b.String()
}

var updateMatrix = os.Getenv("UPDATE_CONFORMANCE_MATRIX") != ""

// TestConformanceMatrix: every script in lua/ (lib.lua aside) has cases,
// and docs/protocol.md shows the matrix the cases make.
// UPDATE_CONFORMANCE_MATRIX=1 rewrites the docs' copy.
func TestConformanceMatrix(t *testing.T) {
	t.Parallel()
	names, err := fs.Glob(luaFS, "lua/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	var scripts []string
	for _, n := range names {
		if n = strings.TrimPrefix(n, "lua/"); n != "lib.lua" {
			scripts = append(scripts, n)
		}
	}
	for _, s := range scripts {
		if !slices.ContainsFunc(conformanceCases, func(c confCase) bool { return c.script == s }) {
			t.Errorf("%s has no conformance case", s)
		}
	}
	for _, c := range conformanceCases {
		if !slices.Contains(scripts, c.script) {
			t.Errorf("case %s/%s names no script in lua/", c.script, c.name)
		}
	}
	matrix := conformanceMatrix(scripts)
	path := filepath.Join(testenv.ModuleRoot(t), "docs", "protocol.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- conformance-matrix:begin -->\n", "<!-- conformance-matrix:end -->"
	i, j := strings.Index(string(doc), begin), strings.Index(string(doc), end)
	if i < 0 || j < i {
		t.Fatalf("docs/protocol.md has no %q ... %q section", begin, end)
	}
	if got := string(doc[i+len(begin) : j]); got != matrix {
		if updateMatrix {
			out := string(doc[:i+len(begin)]) + matrix + string(doc[j:])
			if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("docs/protocol.md's conformance matrix is out of date (UPDATE_CONFORMANCE_MATRIX=1 go test ./internal/shard -run TestConformanceMatrix rewrites it); want:\n%s", matrix)
	}
}
