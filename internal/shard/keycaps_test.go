package shard

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// claimWindow pops every entry of fair queue "t"'s window in shard 0 and
// leases them (lease 30 s), as a worker does, and returns the deliveries.
func claimWindow(t *testing.T, s *Store, rdb *redis.Client) []Delivery {
	t.Helper()
	ctx := testenv.Ctx(t, 10*time.Second)
	v, err := rdb.LPopCount(ctx, s.k.Ready(0, "t"), 1000).Result()
	if err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	refs := make([]string, len(v))
	for i, e := range v {
		refs[i] = EntryRef(e)
	}
	if len(refs) == 0 {
		return nil
	}
	ds, err := s.Claim(ctx, 0, "t", refs, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// byKey counts ids by their key.
func byKey(ds []Delivery) map[string]int {
	out := map[string]int{}
	for _, d := range ds {
		out[KeyOf(d.Task.ID)]++
	}
	return out
}

// TestKeyConcurrencyCap: a fair queue with a cap of 2 per key lets at
// most 2 tasks of a key into the window or running; the others wait,
// unclaimed, with the key held off the ring; an ack, a nack and a
// recovered lease each free a permit that the refill with the key's name
// (a worker's after a settle) or the recovery pass gives to the key's next
// task; a key's own cap overrides the default, 0 lifts it, and a key
// without a key (the tasks without one) is not capped by the default.
func TestKeyConcurrencyCap(t *testing.T) {
	t.Parallel()
	s, rdb := newCapStore(t, 32, 2)
	ctx := testenv.Ctx(t, 30*time.Second)
	var ids []string
	for i := range 6 {
		ids = append(ids, fmt.Sprintf("{a}%d", i), fmt.Sprintf("{b}%d", i), fmt.Sprintf("plain%d", i))
	}
	enqueueDue(t, s, "t", time.Now().Add(-time.Second), ids...)
	if res, err := s.Move(ctx, 0, 1, 1000); err != nil || res.Moved != 18 {
		t.Fatalf("move: %+v %v", res, err)
	}
	running := claimWindow(t, s, rdb)
	if got := byKey(running); got["a"] != 2 || got["b"] != 2 || got[""] != 6 {
		t.Fatalf("first window by key %v, want a:2 b:2 and the 6 without a key", got)
	}
	held := rdb.SMembers(ctx, s.k.FairHeld(0, "t")).Val()
	slices.Sort(held)
	if !slices.Equal(held, []string{"a", "b"}) {
		t.Fatalf("held keys %v, want [a b]", held)
	}
	// Refills without a settle change nothing: the keys are at their cap.
	if n, err := s.FairRefill(ctx, 0, "t"); err != nil || n != 0 {
		t.Fatalf("refill at the caps: %d %v", n, err)
	}
	caps, err := s.KeyCapped(ctx, []string{"t", "other"})
	if err != nil || !caps["t"] || caps["other"] {
		t.Fatalf("KeyCapped: %v %v", caps, err)
	}

	// find returns the n-th delivery of key in ds.
	find := func(ds []Delivery, key string, n int) Delivery {
		t.Helper()
		for _, d := range ds {
			if KeyOf(d.Task.ID) == key {
				if n == 0 {
					return d
				}
				n--
			}
		}
		t.Fatalf("no delivery of key %q in %v", key, ds)
		return Delivery{}
	}
	// An ack frees one of a's permits: one more task of a, none of b.
	a0 := find(running, "a", 0)
	if err := s.Ack(ctx, a0.AckArgs(false)); err != nil {
		t.Fatal(err)
	}
	if n, err := s.FairRefill(ctx, 0, "t", "a"); err != nil || n != 1 {
		t.Fatalf("refill after a's ack: %d %v", n, err)
	}
	next := claimWindow(t, s, rdb)
	if got := byKey(next); got["a"] != 1 || len(next) != 1 {
		t.Fatalf("after a's ack: %v, want one task of a", got)
	}
	// A nack (retry later) frees one of b's.
	b0 := find(running, "b", 0)
	na := b0.NackArgs(false, "try again")
	na.RetryAfter = time.Hour
	if _, err := s.Nack(ctx, na); err != nil {
		t.Fatal(err)
	}
	if n, err := s.FairRefill(ctx, 0, "t", "b"); err != nil || n != 1 {
		t.Fatalf("refill after b's nack: %d %v", n, err)
	}
	if got := byKey(claimWindow(t, s, rdb)); got["b"] != 1 {
		t.Fatalf("after b's nack: %v, want one task of b", got)
	}

	// b's own cap of 0 lifts the default: its 3 waiting tasks come.
	if err := s.SetKeyConcurrency(ctx, "t", "b", 0); err != nil {
		t.Fatal(err)
	}
	if got := byKey(claimWindow(t, s, rdb)); got["b"] != 3 || got["a"] != 0 {
		t.Fatalf("after b's cap went: %v, want b's 3 waiting tasks", got)
	}
	def, own, err := s.KeyConcurrency(ctx, "t")
	if err != nil || def != 2 || own["b"] != 0 || len(own) != 1 {
		t.Fatalf("KeyConcurrency: %d %v %v", def, own, err)
	}

	// a's lease runs out (its worker died): recovery takes the task back
	// (it holds its permit while it is ready again), and once it has
	// been retried to the delayed set a's next task gets the permit.
	a1 := find(running, "a", 1)
	if err := rdb.ZAdd(ctx, s.k.Inflight(0), redis.Z{Score: 1, Member: a1.Task.ID}).Err(); err != nil {
		t.Fatal(err)
	}
	r, err := s.Recover(ctx, 0, 1, RecoverArgs{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if r.Retried+r.Buried != 1 {
		t.Fatalf("recovery of the expired lease: %+v", r)
	}
	if st := taskState(t, s, a1.Task.ID); st == "active" {
		t.Fatalf("%s still active after its lease expired and recovery ran", a1.Task.ID)
	}
	got := byKey(claimWindow(t, s, rdb))
	if got["a"] != 1 {
		t.Fatalf("after a's lease expired: %v, want one task of a", got)
	}
	// Never more than 2 of a pending or in flight.
	if n := countKey(t, s, rdb, "a"); n > 2 {
		t.Fatalf("%d tasks of a hold permits, cap 2", n)
	}
	// The permits of a: its set holds at most the cap after a prune.
	if members := rdb.SMembers(ctx, s.k.FairPermits(0, "t", "a")).Val(); len(members) > 3 {
		t.Fatalf("a's permit set %v", members)
	}
}

// taskState returns a task's state as Lookup reports it.
func taskState(t *testing.T, s *Store, id string) string {
	t.Helper()
	info, err := s.Lookup(context.Background(), id)
	if err != nil {
		return "error: " + err.Error()
	}
	return info.State
}

// countKey counts the tasks of key pending (in the window, popped) or in
// flight in shard 0.
func countKey(t *testing.T, s *Store, rdb *redis.Client, key string) int {
	t.Helper()
	ctx := context.Background()
	n := 0
	pend, _ := rdb.ZRangeWithScores(ctx, s.k.Pending(0, "t"), 0, -1).Result()
	for _, z := range pend {
		if id := z.Member.(string); KeyOf(id) == key && z.Score < 1<<50 {
			n++
		}
	}
	for _, id := range rdb.ZRange(ctx, s.k.Inflight(0), 0, -1).Val() {
		if strings.HasPrefix(id, "{"+key+"}") {
			n++
		}
	}
	return n
}

// newCapStore returns a one-shard store with the fair queue "t" (window
// window, a cap of cap per key).
func newCapStore(t *testing.T, window, cap int) (*Store, *redis.Client) {
	t.Helper()
	return newKeyedStore(t, QueuePolicy{FairWindow: window, KeyConcurrency: cap})
}

// newKeyedStore returns a one-shard store with the fair queue "t" of
// policy p (its retries, timeout and payload bound filled in).
func newKeyedStore(t *testing.T, p QueuePolicy) (*Store, *redis.Client) {
	t.Helper()
	rdb := testenv.StartRedis(t).Client(t)
	l, err := NewLayout("hgkeys", 1)
	if err != nil {
		t.Fatal(err)
	}
	s := NewStore(rdb, l)
	p.MaxRetries, p.Timeout, p.MaxPayload = 3, 30*time.Second, 1024
	if err := s.RegisterQueues(context.Background(), map[string]QueuePolicy{"t": p}); err != nil {
		t.Fatal(err)
	}
	return s, rdb
}

// TestKeyPermitsReleasedAndStale: a settle's refill gives the task's
// permit back at once (the id leaves the key's permit set, which expires
// within a week), and entries of cancelled tasks ahead of a held key's
// next task do not count against its cap: the key is back on the ring.
func TestKeyPermitsReleasedAndStale(t *testing.T) {
	t.Parallel()
	s, rdb := newCapStore(t, 32, 2)
	ctx := testenv.Ctx(t, 30*time.Second)
	if err := s.SetKeyWeight(ctx, "t", "s", 2); err != nil {
		t.Fatal(err)
	}
	enqueueDue(t, s, "t", time.Now().Add(-time.Second), "{s}0", "{s}1", "{s}2", "{s}3", "{s}4")
	if _, err := s.Move(ctx, 0, 1, 1000); err != nil {
		t.Fatal(err)
	}
	running := claimWindow(t, s, rdb)
	if got := byKey(running); got["s"] != 2 {
		t.Fatalf("first window %v, want 2 of s", got)
	}
	permits := s.k.FairPermits(0, "t", "s")
	if ttl := rdb.PTTL(ctx, permits).Val(); ttl <= 0 || ttl > 7*24*time.Hour {
		t.Fatalf("the permit set's expiry: %v", ttl)
	}
	// s2 and s3 are cancelled while they wait: their entries are stale.
	for _, id := range []string{"{s}2", "{s}3"} {
		if _, err := s.Cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Ack(ctx, running[0].AckArgs(false)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.FairRefill(ctx, 0, "t", running[0].Task.ID); err != nil {
		t.Fatal(err)
	}
	if rdb.SIsMember(ctx, permits, running[0].Task.ID).Val() {
		t.Fatalf("%s still holds a permit after its ack's refill", running[0].Task.ID)
	}
	// The refill took the two stale entries for s's turn and held s; it
	// must be back on the ring, so that the next refill brings s4.
	if rdb.SIsMember(ctx, s.k.FairHeld(0, "t"), "s").Val() {
		t.Fatal("s is held with a permit free: its stale entries counted against its cap")
	}
	if _, err := s.FairRefill(ctx, 0, "t"); err != nil {
		t.Fatal(err)
	}
	if got := claimWindow(t, s, rdb); len(got) != 1 || got[0].Task.ID != "{s}4" {
		t.Fatalf("after the ack: %v, want {s}4", got)
	}
}

// TestHeldKeyOnTheRingOnce: a held key whose list a change emptied, and
// that a new task puts on the ring again while the window is full (so
// that no refill reaches it), is not put there twice by the next
// settle's refill.
func TestHeldKeyOnTheRingOnce(t *testing.T) {
	t.Parallel()
	s, rdb := newCapStore(t, 1, 1)
	ctx := testenv.Ctx(t, 30*time.Second)
	now := time.Now()
	move := func() {
		t.Helper()
		if _, err := s.Move(ctx, 0, 1, 1000); err != nil {
			t.Fatal(err)
		}
	}
	enqueueDue(t, s, "t", now.Add(-time.Second), "{k}0", "{k}1")
	move()
	running := claimWindow(t, s, rdb) // {k}0; k held with {k}1 waiting
	if len(running) != 1 {
		t.Fatalf("first window: %v", running)
	}
	if _, err := s.Change(ctx, "{k}1", Change{SetDue: true, Due: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	enqueueDue(t, s, "t", now.Add(-time.Second), "{l}0", "{l}1", "{l}2")
	move() // the window is full: {l}0
	enqueueDue(t, s, "t", now.Add(-time.Second), "{k}2")
	move() // k's list was empty: k goes on the ring; no refill reaches it
	if err := s.Ack(ctx, running[0].AckArgs(false)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.FairRefill(ctx, 0, "t", running[0].Task.ID); err != nil {
		t.Fatal(err)
	}
	ring := rdb.LRange(ctx, s.k.FairRing(0, "t"), 0, -1).Val()
	if n := slices.Index(ring, "k"); n < 0 || slices.Contains(ring[n+1:], "k") {
		t.Fatalf("ring %v: want k on it once", ring)
	}
}

// TestGrowCopiesKeysCapsAndWeights: a change of the shard count gives
// the new shards the keys' own caps and weights, as shard 0 holds them.
func TestGrowCopiesKeysCapsAndWeights(t *testing.T) {
	t.Parallel()
	s, rdb := newCapStore(t, 32, 2)
	ctx := testenv.Ctx(t, 30*time.Second)
	if err := s.SetKeyConcurrency(ctx, "t", "big", 0); err != nil {
		t.Fatal(err)
	}
	if err := s.SetKeyWeight(ctx, "t", "big", 5); err != nil {
		t.Fatal(err)
	}
	if _, err := s.BeginResize(ctx, 3); err != nil {
		t.Fatal(err)
	}
	for sh := 1; sh < 3; sh++ {
		if c, err := rdb.HGet(ctx, s.k.FairCaps(sh, "t"), "big").Result(); err != nil || c != "0" {
			t.Errorf("shard %d: big's cap %q, %v; want 0", sh, c, err)
		}
		if w, err := rdb.HGet(ctx, s.k.FairWeights(sh, "t"), "big").Result(); err != nil || w != "5" {
			t.Errorf("shard %d: big's weight %q, %v; want 5", sh, w, err)
		}
	}
}

// TestKeyRate: a rate per key of 5/s with bursts of 2 lets a key's first
// 2 tasks into the window, then holds it, with a wake-up member in the
// delayed set at its next token's time, which the mover acts on to let
// one more in; refills before then let none in. A key's own rate of 0
// lifts the default for it.
func TestKeyRate(t *testing.T) {
	t.Parallel()
	s, rdb := newKeyedStore(t, QueuePolicy{FairWindow: 32, KeyRate: KeyRate{Rate: 5, Period: time.Second, Burst: 2}})
	ctx := testenv.Ctx(t, 30*time.Second)
	// b's own rate: bursts of 8 at 3/s, a burst a floating-point quotient
	// would cut to 7.
	if err := s.SetKeyRate(ctx, "t", "b", KeyRate{Rate: 3, Period: time.Second, Burst: 8}, false); err != nil {
		t.Fatal(err)
	}
	var bs []string
	for i := range 10 {
		bs = append(bs, fmt.Sprintf("{b}%d", i))
	}
	enqueueDue(t, s, "t", time.Now().Add(-time.Second), append(bs, "{r}0", "{r}1", "{r}2", "{r}3", "{o}0", "{o}1", "{o}2", "{o}3")...)
	if _, err := s.Move(ctx, 0, 1, 1000); err != nil {
		t.Fatal(err)
	}
	if got := byKey(claimWindow(t, s, rdb)); got["r"] != 2 || got["o"] != 2 || got["b"] != 8 {
		t.Fatalf("first window %v, want the bursts: 2 of r, 2 of o, 8 of b", got)
	}
	now := rdb.Time(ctx).Val()
	at, err := rdb.ZScore(ctx, s.k.FairWake(0), "t|r").Result()
	if err != nil {
		t.Fatalf("no wake-up for r: %v", err)
	}
	if next, err := rdb.HGet(ctx, s.k.Queues(0), "|fwnext").Float64(); err != nil || next > at {
		t.Fatalf("the shard's next wake-up %v, %v; want at most r's %v", next, err, at)
	}
	if n := rdb.ZCard(ctx, s.k.Delayed(0)).Val(); n != 0 {
		t.Fatalf("the delayed set holds %d members: the wake-ups are not tasks", n)
	}
	if wait := time.UnixMilli(int64(at)).Sub(now); wait <= 0 || wait > 250*time.Millisecond {
		t.Fatalf("r's wake-up in %v, want its next token's time, within 200 ms", wait)
	}
	// A refill before then lets none in: r and o are held.
	if n, err := s.FairRefill(ctx, 0, "t"); err != nil || n != 0 {
		t.Fatalf("refill before the next token: %d %v", n, err)
	}
	// A mover call with a prefetch before the token's time leaves the
	// wake-up, and reports its time to call at exactly.
	res, err := s.MoveAhead(ctx, 0, 1, 1000, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if res.Now < int64(at) {
		if sc, err := rdb.ZScore(ctx, s.k.FairWake(0), "t|r").Result(); err != nil || sc != at {
			t.Fatalf("the wake-up after an early call: %v %v, want %v", sc, err, at)
		}
		if res.NextWake > int64(at) || res.NextWake < 0 || res.NextDue >= 0 {
			t.Fatalf("an early call reported %+v; want next wake at or before %v and no next due", res, at)
		}
	}
	// The scheduled tasks listed are the tasks, not the marker.
	if d, err := s.Depth(ctx, []int{0}); err != nil || d[0][0].Scheduled != 0 {
		t.Fatalf("depth %+v %v: the marker counted as scheduled", d, err)
	}
	// The mover acts on the wake-up: one more of r.
	var got map[string]int
	testenv.WaitFor(t, 10*time.Second, "r's next token", func() (bool, string) {
		if _, err := s.Move(ctx, 0, 1, 1000); err != nil {
			return false, err.Error()
		}
		got = byKey(claimWindow(t, s, rdb))
		return got["r"] > 0, fmt.Sprint(got)
	})
	if got["r"] != 1 {
		t.Fatalf("after r's wake-up %v, want one of r", got)
	}
	// o's own rate of 0: its tasks are no longer limited.
	if err := s.SetKeyRate(ctx, "t", "o", KeyRate{}, false); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range claimWindow(t, s, rdb) {
		if KeyOf(d.Task.ID) == "o" {
			n++
		}
	}
	if n+got["o"] != 2 {
		t.Fatalf("o's 2 waiting tasks after its rate was lifted: %d (and %d before)", n, got["o"])
	}
	def, own, err := s.KeyRates(ctx, "t")
	if err != nil || def.Rate != 5 || def.Burst != 2 || def.Period != time.Second || own["o"] != (KeyRate{}) {
		t.Fatalf("KeyRates: %+v %v %v", def, own, err)
	}
	// b is out of tokens for 1/3 s; a raised rate applies at once.
	if err := s.SetKeyRate(ctx, "t", "b", KeyRate{Rate: 100, Period: time.Second, Burst: 10}, false); err != nil {
		t.Fatal(err)
	}
	if got := byKey(claimWindow(t, s, rdb)); got["b"] != 2 {
		t.Fatalf("after b's rate was raised: %v, want its last 2 tasks", got)
	}
}

// TestKeyRateKinds: a key's rate by each of the other limiters: a fixed
// window admits its rate until the window ends, a sliding window its
// rate in any period, a leaky bucket one at a time, evenly spaced; each
// held key's wake-up is at the time its next admission comes, and the
// mover lets the next ones in then.
func TestKeyRateKinds(t *testing.T) {
	t.Parallel()
	s, rdb := newKeyedStore(t, QueuePolicy{FairWindow: 64})
	ctx := testenv.Ctx(t, 30*time.Second)
	rates := map[string]KeyRate{
		"f": {Rate: 3, Period: time.Hour, Burst: 1, Kind: LimiterFixedWindow},
		"s": {Rate: 4, Period: time.Hour, Burst: 1, Kind: LimiterSlidingWindow},
		"l": {Rate: 2, Period: time.Hour, Burst: 1, Kind: LimiterLeakyBucket},
		"q": {Rate: 2, Period: 400 * time.Millisecond, Burst: 1, Kind: LimiterSlidingWindow},
	}
	var ids []string
	for k, r := range rates {
		if err := s.SetKeyRate(ctx, "t", k, r, false); err != nil {
			t.Fatal(err)
		}
		for i := range 6 {
			ids = append(ids, fmt.Sprintf("{%s}%d", k, i))
		}
	}
	if err := s.SetKeyRate(ctx, "t", "x", KeyRate{Rate: 2, Period: time.Second, Burst: 3, Kind: LimiterLeakyBucket}, false); err == nil {
		t.Fatal("a leaky bucket with a burst of 3 accepted")
	}
	_, own, err := s.KeyRates(ctx, "t")
	if err != nil || own["f"] != rates["f"] || own["s"] != rates["s"] || own["l"].Kind != LimiterLeakyBucket {
		t.Fatalf("KeyRates: %+v %v", own, err)
	}
	enqueueDue(t, s, "t", time.Now().Add(-time.Second), ids...)
	before := rdb.Time(ctx).Val()
	if _, err := s.Move(ctx, 0, 1, 1000); err != nil {
		t.Fatal(err)
	}
	// q's sliding window logs its admissions' times (Redis's clock, µs).
	qlog := s.k.FairBucket(0, "t", "q") + "|w"
	admitted := func() []float64 {
		var out []float64
		for _, z := range rdb.ZRangeWithScores(ctx, qlog, 0, -1).Val() {
			out = append(out, z.Score)
		}
		return out
	}
	first := admitted()
	got := byKey(claimWindow(t, s, rdb))
	after := rdb.Time(ctx).Val()
	sameWindow := before.Truncate(time.Hour).Equal(after.Truncate(time.Hour))
	if (sameWindow && got["f"] != 3) || got["s"] != 4 || got["l"] != 1 || got["q"] != 2 {
		t.Fatalf("first window %v, want 3 of f (fixed window), 4 of s (sliding), 1 of l (leaky), 2 of q", got)
	}
	wake := func(k string) time.Time {
		at, err := rdb.ZScore(ctx, s.k.FairWake(0), "t|"+k).Result()
		if err != nil {
			t.Fatalf("no wake-up for %s: %v", k, err)
		}
		return time.UnixMilli(int64(at))
	}
	if w := wake("f"); sameWindow && !w.Equal(after.Truncate(time.Hour).Add(time.Hour)) {
		t.Fatalf("f's wake-up at %v, want its window's end %v", w, after.Truncate(time.Hour).Add(time.Hour))
	}
	for k, want := range map[string]time.Duration{"s": time.Hour, "l": 30 * time.Minute} {
		if d := wake(k).Sub(after); d < want-5*time.Second || d > want+time.Second {
			t.Fatalf("%s's wake-up in %v, want about %v", k, d, want)
		}
	}
	// q's window slides: two more once the first two are 400 ms old.
	testenv.WaitFor(t, 10*time.Second, "q's next admissions", func() (bool, string) {
		if _, err := s.Move(ctx, 0, 1, 1000); err != nil {
			return false, err.Error()
		}
		got = byKey(claimWindow(t, s, rdb))
		return got["q"] > 0, fmt.Sprint(got)
	})
	if got["q"] != 2 || got["f"]+got["s"]+got["l"] != 0 {
		t.Fatalf("after q's wake-up %v, want 2 of q and none of the others", got)
	}
	// The next ones were let in no sooner than the period after the
	// first (on Redis's clock, whatever the machine's load), which then
	// left the log.
	next := admitted()
	if len(first) != 2 || len(next) != 2 || slices.Min(next)-slices.Max(first) < 400_000 {
		t.Fatalf("q's admissions at %v µs, then %v: want 2, then 2 at least 400 ms later", first, next)
	}
}

// TestRemovedFairQueueLeavesNoState: once a removed fair queue has
// drained, the recovery pass drops its fairness, its default caps and
// rates per key and its keys' own weights, caps and rates with its
// registration, so that a queue added again by that name starts clean.
func TestRemovedFairQueueLeavesNoState(t *testing.T) {
	t.Parallel()
	s, rdb := newKeyedStore(t, QueuePolicy{FairWindow: 8, KeyConcurrency: 2, KeyRate: KeyRate{Rate: 5, Period: time.Second, Burst: 1}})
	ctx := testenv.Ctx(t, 30*time.Second)
	if err := s.SetKeyWeight(ctx, "t", "a", 3); err != nil {
		t.Fatal(err)
	}
	if err := s.SetKeyConcurrency(ctx, "t", "a", 4); err != nil {
		t.Fatal(err)
	}
	if err := s.SetKeyRate(ctx, "t", "a", KeyRate{Rate: 9, Period: time.Second, Kind: LimiterFixedWindow}, false); err != nil {
		t.Fatal(err)
	}
	state := []string{s.k.FairWeights(0, "t"), s.k.FairCaps(0, "t"), s.k.FairRates(0, "t")}
	if n := rdb.Exists(ctx, state...).Val(); n != 3 {
		t.Fatalf("%d of the keys' state hashes, want 3", n)
	}
	if err := s.RemoveQueue(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recover(ctx, 0, 1, RecoverArgs{Limit: 100}); err != nil {
		t.Fatal(err)
	}
	reg := rdb.HGetAll(ctx, s.k.Queues(0)).Val()
	for f := range reg {
		// (shard 0's "|num|t" speaks for the namespace: a queue keeps its
		// number, which is never given to another.)
		if (strings.HasSuffix(f, "|t") || f == "t") && f != "|num|t" {
			t.Errorf("the registry keeps %q = %q after the removed queue drained", f, reg[f])
		}
	}
	if n := rdb.Exists(ctx, state...).Val(); n != 0 {
		t.Fatalf("%d of the keys' state hashes left after the removed queue drained", n)
	}
}
