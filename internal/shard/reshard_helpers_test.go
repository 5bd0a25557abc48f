package shard

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// Helpers of the resharding tests (reshard_test.go, reshard_move_test.go,
// reshard_change_test.go).

// newSizedStore starts a Redis and returns a store of namespace "rs" with
// n shards and the queues "default" and "mail" registered (as
// newTestStore does for 4 shards).
func newSizedStore(t *testing.T, n int) (*Store, *redis.Client) {
	t.Helper()
	rdb := testenv.StartRedis(t).Client(t)
	return sizedStoreOn(t, rdb, n), rdb
}

// sizedStoreOn returns a store of namespace "rs" with n shards on rdb and
// registers the queues "default" and "mail" in its shards.
func sizedStoreOn(t *testing.T, rdb redis.UniversalClient, n int) *Store {
	t.Helper()
	l, err := NewLayout("rs", n)
	if err != nil {
		t.Fatal(err)
	}
	s := NewStore(rdb, l)
	if err := s.RegisterQueues(context.Background(), map[string]QueuePolicy{
		"default": {MaxRetries: 3, Timeout: 30 * time.Second, MaxPayload: 1024},
		"mail":    {MaxRetries: 7, Timeout: 5 * time.Second, MaxPayload: 1024},
	}); err != nil {
		t.Fatal(err)
	}
	return s
}

// markers returns the layout markers of shards 0..n-1 ("" for none).
func markers(t *testing.T, ctx context.Context, rdb redis.UniversalClient, l Layout, n int) []string {
	t.Helper()
	out := make([]string, n)
	for sh := range out {
		v, err := rdb.Get(ctx, l.Marker(sh)).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		out[sh] = v
	}
	return out
}

// wantMarkers fails the test unless every one of shards 0..n-1 has the
// marker want.
func wantMarkers(t *testing.T, ctx context.Context, rdb redis.UniversalClient, l Layout, n int, want string) {
	t.Helper()
	for sh, m := range markers(t, ctx, rdb, l, n) {
		if m != want {
			t.Fatalf("marker of shard %d is %q, want %q", sh, m, want)
		}
	}
}

// wantLayout fails the test unless l is generation gen with shards and
// from.
func wantLayout(t *testing.T, what string, l Layout, gen int64, shards, from int) {
	t.Helper()
	if l.Gen() != gen || l.Shards() != shards || l.From() != from {
		t.Fatalf("%s: generation %d, %d shards from %d; want %d, %d from %d", what, l.Gen(), l.Shards(), l.From(), gen, shards, from)
	}
}

// rsEpoch is the fencing epoch of the old shards' owner.
const rsEpoch = 7

// Kinds of seeded tasks (seedKinds). Tasks of the queue "mail" are marked.
const (
	kSched  = "sched"  // queue mail, due in 3 hours (delayed set)
	kSoon   = "soon"   // due in 20 s (delayed set): within a minute's margin
	kRetry  = "retry"  // failed once, retried in 3 hours: 1 attempt, last error "boom"
	kDead   = "dead"   // buried (not retryable, "fatal"), with a last error written by hand
	kReady  = "ready"  // in its ready list
	kLeased = "leased" // leased
	kFar    = "far"    // queue mail, due in 48 hours, in the far tier (turned on for it)
)

// seedKinds stores task id (payload "p-<id>") in shard sh as kinds[id]
// says. Every id must be of shard sh in the store's layout, and the shard
// must hold no other task that is due or ready. It moves with rsEpoch.
func seedKinds(t *testing.T, ctx context.Context, s *Store, rdb redis.UniversalClient, sh int, kinds map[string]string) {
	t.Helper()
	l := s.Layout()
	byKind := map[string][]string{}
	for _, id := range slices.Sorted(maps.Keys(kinds)) {
		if l.ShardOf(id) != sh {
			t.Fatalf("seed: %s is not of shard %d", id, sh)
		}
		byKind[kinds[id]] = append(byKind[kinds[id]], id)
	}
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	enqueue := func(queue string, due time.Time, ids ...string) {
		t.Helper()
		for _, id := range ids {
			if r := s.Enqueue(ctx, EnqueueArgs{ID: id, Queue: queue, Due: due, MaxRetries: -1, Payload: []byte("p-" + id)}); r.Err != nil {
				t.Fatalf("seed: enqueue %s: %v", id, r.Err)
			}
		}
	}
	moveAll := func(n int) {
		t.Helper()
		if res, err := s.Move(ctx, sh, rsEpoch, 1000); err != nil || res.Moved != n {
			t.Fatalf("seed: move: %+v, %v; want %d moved", res, err, n)
		}
	}
	// Through a delivery: popped, leased, then failed or kept.
	popped := slices.Concat(byKind[kLeased], byKind[kRetry], byKind[kDead])
	if len(popped) > 0 {
		enqueue("default", now.Add(-time.Second), popped...)
		moveAll(len(popped))
		entries, err := rdb.LPopCount(ctx, l.Ready(sh, "default"), len(popped)).Result()
		if err != nil || len(entries) != len(popped) {
			t.Fatalf("seed: pop: %v, %v", entries, err)
		}
		ds, err := s.Claim(ctx, sh, "default", entries, 0) // Claim takes "seq|id" refs; whole entries start with them
		if err != nil || len(ds) != len(popped) {
			t.Fatalf("seed: claim: %v, %v", ds, err)
		}
		for _, d := range ds {
			switch kinds[d.Task.ID] {
			case kRetry:
				a := d.NackArgs(false, "boom")
				a.RetryAfter = 3 * time.Hour
				if r, err := s.Nack(ctx, a); err != nil || r.Dead || r.Attempts != 1 {
					t.Fatalf("seed: nack %s: %+v, %v", d.Task.ID, r, err)
				}
			case kDead:
				a := d.NackArgs(false, "fatal")
				a.Dead = true
				if r, err := s.Nack(ctx, a); err != nil || !r.Dead {
					t.Fatalf("seed: bury %s: %+v, %v", d.Task.ID, r, err)
				}
				// Burial drops the last error (it is in the dead record);
				// one written by hand shows that the move carries it.
				if err := rdb.HSet(ctx, l.Errors(sh), d.Task.ID, "earlier failure").Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if ids := byKind[kReady]; len(ids) > 0 {
		enqueue("default", now.Add(-time.Second), ids...)
		moveAll(len(ids))
	}
	enqueue("mail", now.Add(3*time.Hour), byKind[kSched]...)
	enqueue("default", now.Add(20*time.Second), byKind[kSoon]...)
	if ids := byKind[kFar]; len(ids) > 0 {
		if err := s.SetFarTier(ctx, FarTier{Bucket: time.Minute, Lead: time.Second}); err != nil {
			t.Fatal(err)
		}
		enqueue("mail", now.Add(48*time.Hour), ids...)
		for _, id := range ids {
			if _, err := rdb.ZScore(ctx, l.Delayed(sh), id).Result(); !errors.Is(err, redis.Nil) {
				t.Fatalf("seed: far task %s in the delayed set: %v", id, err)
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(kinds)) {
		want := map[string]string{kSched: "scheduled", kSoon: "scheduled", kRetry: "scheduled", kDead: "dead", kReady: "ready", kLeased: "active", kFar: "scheduled"}[kinds[id]]
		if info, err := s.Lookup(ctx, id); err != nil || info.State != want {
			t.Fatalf("seed: %s (%s) is %+v, %v; want %s", id, kinds[id], info, err, want)
		}
	}
}

// countOf is the counts field (Layout.Counts) a seeded kind is counted
// under, "" for kinds not counted there or that stay.
func countOf(kind string) string {
	switch kind {
	case kSched, kFar:
		return "s|mail"
	case kSoon, kRetry:
		return "s|default"
	case kDead:
		return "d|default"
	case kLeased:
		return "l|default"
	}
	return ""
}

// countsOf returns shard sh's non-zero task counts.
func countsOf(t *testing.T, ctx context.Context, rdb redis.UniversalClient, l Layout, sh int) map[string]int64 {
	t.Helper()
	m, err := rdb.HGetAll(ctx, l.Counts(sh)).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for k, v := range m {
		if strings.HasPrefix(k, "#") {
			continue // an operation's tally (lib.lua's tally), no task count
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			t.Fatalf("shard %d counts %s = %q", sh, k, v)
		}
		if n != 0 {
			out[k] = n
		}
	}
	return out
}

// placesOf returns where shard sh holds id: "data", "delayed",
// "inflight", "dead", "deadinfo", "errors", "pending" (its queue's
// pending set), "far" (an entry in a far-tier bucket) and "outbox".
func placesOf(t *testing.T, ctx context.Context, rdb redis.UniversalClient, l Layout, sh int, id string) []string {
	t.Helper()
	var out []string
	blob, err := rdb.HGet(ctx, l.Tasks(sh), id).Result()
	if err == nil {
		out = append(out, "data")
	}
	for _, z := range []struct{ name, key string }{{"delayed", l.Delayed(sh)}, {"inflight", l.Inflight(sh)}, {"dead", l.Dead(sh)}} {
		if _, err := rdb.ZScore(ctx, z.key, id).Result(); err == nil {
			out = append(out, z.name)
		}
	}
	for _, h := range []struct{ name, key string }{{"deadinfo", l.DeadInfo(sh)}, {"errors", l.Errors(sh)}} {
		if rdb.HExists(ctx, h.key, id).Val() {
			out = append(out, h.name)
		}
	}
	if q := blobQueue(NewStore(rdb, l), blob); q != "" {
		if _, err := rdb.ZScore(ctx, l.Pending(sh, q), id).Result(); err == nil {
			out = append(out, "pending")
		}
	}
	buckets, err := rdb.ZRange(ctx, l.Far(sh), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range buckets {
		entries, err := rdb.LRange(ctx, l.FarBucket(sh, b), 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(entries, func(e string) bool { return strings.HasPrefix(e, id+"|") }) {
			out = append(out, "far")
		}
	}
	if rdb.HExists(ctx, l.Outbox(sh), id).Val() {
		out = append(out, "outbox")
	}
	return out
}

// lookupAll returns the Lookup of every id.
func lookupAll(t *testing.T, ctx context.Context, s *Store, ids []string) map[string]Info {
	t.Helper()
	out := map[string]Info{}
	for _, id := range ids {
		info, err := s.Lookup(ctx, id)
		if err != nil {
			t.Fatalf("lookup %s: %v", id, err)
		}
		out[id] = info
	}
	return out
}

// infoDiff describes how b differs from a ("" if it does not).
func infoDiff(a, b Info) string {
	var d []string
	if a.State != b.State {
		d = append(d, "state "+a.State+" -> "+b.State)
	}
	if !a.At.Equal(b.At) {
		d = append(d, "at "+a.At.String()+" -> "+b.At.String())
	}
	if a.DeadInfo != b.DeadInfo || a.LastError != b.LastError {
		d = append(d, "dead info/last error "+a.DeadInfo+"/"+a.LastError+" -> "+b.DeadInfo+"/"+b.LastError)
	}
	ta, tb := a.Task, b.Task
	if ta.ID != tb.ID || ta.Queue != tb.Queue || ta.Attempts != tb.Attempts || ta.MaxRetries != tb.MaxRetries ||
		ta.Timeout != tb.Timeout || !ta.Due.Equal(tb.Due) || !ta.Enqueued.Equal(tb.Enqueued) || string(ta.Payload) != string(tb.Payload) ||
		a.DecodeErr != nil || b.DecodeErr != nil {
		d = append(d, "task data differs")
	}
	return strings.Join(d, "; ")
}

// exportAll exports ids from shard sh for the store's running change,
// with rsEpoch and a margin of a second, and fails the test unless every
// one of them was exported.
func exportAll(t *testing.T, ctx context.Context, s *Store, sh int, ids ...string) []Exported {
	t.Helper()
	r, err := s.Export(ctx, s.Layout(), sh, rsEpoch, time.Second, ids)
	if err != nil || len(r.Tasks) != len(ids) {
		t.Fatalf("export %v from shard %d: %+v, %v", ids, sh, r, err)
	}
	return r.Tasks
}

// importAll imports the tasks into their shards of l, one call per shard,
// and returns how many were stored.
func importAll(t *testing.T, ctx context.Context, s *Store, l Layout, tasks []Exported) int {
	t.Helper()
	byShard := map[int][]Exported{}
	for _, e := range tasks {
		byShard[l.ShardOf(e.ID)] = append(byShard[l.ShardOf(e.ID)], e)
	}
	n := 0
	for sh, ts := range byShard {
		k, err := s.Import(ctx, l, sh, ts)
		if err != nil {
			t.Fatalf("import into shard %d: %v", sh, err)
		}
		n += k
	}
	return n
}

// exportedIDs returns the ids of tasks, sorted.
func exportedIDs(tasks []Exported) []string {
	var out []string
	for _, e := range tasks {
		out = append(out, e.ID)
	}
	slices.Sort(out)
	return out
}

// checkMoved checks that every id of kinds that Export takes out (all but
// soon, ready and leased) is in its new shard of l as before (Lookup),
// in exactly one of its sets and with its dead record and last error
// where they belong, and that old holds nothing of it but, for a far-tier
// task, a stale bucket entry; and that the other kinds are as before in
// old.
func checkMoved(t *testing.T, ctx context.Context, s *Store, rdb redis.UniversalClient, old int, kinds map[string]string, before map[string]Info) {
	t.Helper()
	l := s.Layout()
	after := lookupAll(t, ctx, s, slices.Sorted(maps.Keys(kinds)))
	for _, id := range slices.Sorted(maps.Keys(kinds)) {
		kind := kinds[id]
		if d := infoDiff(before[id], after[id]); d != "" {
			t.Errorf("%s (%s) changed: %s", id, kind, d)
		}
		stays := kind == kSoon || kind == kReady || kind == kLeased
		oldPlaces := placesOf(t, ctx, rdb, l, old, id)
		if stays {
			want := map[string][]string{kSoon: {"data", "delayed"}, kReady: {"data", "pending"}, kLeased: {"data", "inflight"}}[kind]
			if !slices.Equal(oldPlaces, want) {
				t.Errorf("%s (%s) stayed in the old shard %d as %v, want %v", id, kind, old, oldPlaces, want)
			}
			continue
		}
		if len(oldPlaces) > 0 && !(kind == kFar && slices.Equal(oldPlaces, []string{"far"})) {
			t.Errorf("%s (%s) left %v in the old shard %d", id, kind, oldPlaces, old)
		}
		sh := l.ShardOf(id)
		got := placesOf(t, ctx, rdb, l, sh, id)
		var want [][]string
		switch kind {
		case kDead:
			want = [][]string{{"data", "dead", "deadinfo", "errors"}}
		case kRetry:
			want = [][]string{{"data", "delayed", "errors"}, {"data", "errors", "far"}}
		default:
			want = [][]string{{"data", "delayed"}, {"data", "far"}}
		}
		if !slices.ContainsFunc(want, func(w []string) bool { return slices.Equal(w, got) }) {
			t.Errorf("%s (%s) is in its new shard %d as %v, want one of %v", id, kind, sh, got, want)
		}
	}
}
