package shard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// newFairStore returns a one-shard store with the fair queue "t" (window
// 4) and the plain queue "fifo".
func newFairStore(t *testing.T) (*Store, *redis.Client) {
	t.Helper()
	rdb := testenv.StartRedis(t).Client(t)
	l, err := NewLayout("hgfair", 1)
	if err != nil {
		t.Fatal(err)
	}
	s := NewStore(rdb, l)
	err = s.RegisterQueues(context.Background(), map[string]QueuePolicy{
		"t":    {MaxRetries: 3, Timeout: 30 * time.Second, MaxPayload: 1024, FairWindow: 4},
		"fifo": {MaxRetries: 3, Timeout: 30 * time.Second, MaxPayload: 1024},
	})
	if err != nil {
		t.Fatal(err)
	}
	return s, rdb
}

// enqueueDue enqueues ids to queue, due at due (in the past: due now).
func enqueueDue(t *testing.T, s *Store, queue string, due time.Time, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if r := s.Enqueue(context.Background(), EnqueueArgs{ID: id, Queue: queue, Due: due, MaxRetries: -1}); r.Err != nil {
			t.Fatalf("enqueue %s: %v", id, r.Err)
		}
	}
}

// takeWindow pops every entry of queue's ready list in shard 0 and
// returns their ids in order.
func takeWindow(t *testing.T, s *Store, rdb *redis.Client, queue string) []string {
	t.Helper()
	return popIDs(t, rdb, s.k.Ready(0, queue))
}

// popIDs pops every entry of ready list key and returns their ids in
// order.
func popIDs(t *testing.T, rdb redis.Cmdable, key string) []string {
	t.Helper()
	v, err := rdb.LPopCount(context.Background(), key, 100000).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range v {
		ids = append(ids, strings.SplitN(e, "|", 3)[1])
	}
	return ids
}

func TestFairQueueTakesKeysInTurns(t *testing.T) {
	t.Parallel()
	s, rdb := newFairStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	now := time.Now()
	// The big key's tasks are due first; in due order they would all go
	// before the others.
	var big []string
	for i := range 10 {
		big = append(big, "{big}"+string(rune('0'+i)))
	}
	enqueueDue(t, s, "t", now.Add(-10*time.Second), big...)
	enqueueDue(t, s, "t", now.Add(-time.Second), "{a}1", "{b}1", "{c}1", "plain")
	enqueueDue(t, s, "fifo", now.Add(-time.Second), "{x}1", "{x}2")
	res, err := s.Move(ctx, 0, 1, 1000)
	if err != nil || res.Moved != 16 {
		t.Fatalf("move: %+v %v", res, err)
	}
	// One turn each, in the order the keys first came due; the window
	// holds 4. A plain queue is untouched.
	if got := takeWindow(t, s, rdb, "fifo"); !slices.Equal(got, []string{"{x}1", "{x}2"}) {
		t.Fatalf("plain queue's ready list %v", got)
	}
	if got, want := takeWindow(t, s, rdb, "t"), []string{"{big}0", "plain", "{a}1", "{b}1"}; !slices.Equal(got, want) {
		t.Fatalf("first window %v, want %v", got, want)
	}
	// Every task is ready, in the window or waiting: depth counts them.
	d, err := s.Depth(ctx, []int{0})
	if err != nil {
		t.Fatal(err)
	}
	for _, qd := range d[0] {
		if qd.Queue == "t" && (qd.Ready != 10 || qd.Popped != 4) {
			t.Fatalf("depth %+v, want 10 ready (waiting) and 4 popped", qd)
		}
	}
	// A cancelled waiting task is dropped by the refill, and its place
	// goes to the next entry.
	if _, err := s.Cancel(ctx, "{big}1"); err != nil {
		t.Fatal(err)
	}
	if n, err := s.FairRefill(ctx, 0, "t"); err != nil || n != 4 {
		t.Fatalf("refill: %d %v", n, err)
	}
	if got, want := takeWindow(t, s, rdb, "t"), []string{"{c}1", "{big}2", "{big}3", "{big}4"}; !slices.Equal(got, want) {
		t.Fatalf("second window %v, want %v", got, want)
	}
	// Recovery takes the popped ones for stranded (popped and never
	// leased), never the waiting ones.
	popped := []string{"{big}0", "plain", "{a}1", "{b}1", "{c}1", "{big}2", "{big}3", "{big}4", "{x}1", "{x}2"}
	r, err := s.Recover(ctx, 0, 1, RecoverArgs{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Candidates) != len(popped) {
		t.Fatalf("stranded candidates %v, want the %d popped", r.Candidates, len(popped))
	}
	for _, c := range r.Candidates {
		if !slices.Contains(popped, c[strings.LastIndexByte(c, '|')+1:]) {
			t.Fatalf("recovery took a waiting task for popped: %v", r.Candidates)
		}
	}
	for _, id := range []string{"{big}5", "{big}9"} {
		if info, err := s.Lookup(ctx, id); err != nil || info.State != "ready" {
			t.Fatalf("%s: %+v %v, want ready", id, info, err)
		}
	}
}

func TestFairKeyWeight(t *testing.T) {
	t.Parallel()
	s, rdb := newFairStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	if err := s.SetKeyWeight(ctx, "t", "heavy", 5); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct {
		key string
		w   int
	}{{"heavy", -1}, {"heavy", MaxKeyWeight + 1}, {"a}b", 2}} {
		if err := s.SetKeyWeight(ctx, "t", bad.key, bad.w); err == nil {
			t.Errorf("SetKeyWeight(%q, %d) accepted", bad.key, bad.w)
		}
	}
	now := time.Now()
	enqueueDue(t, s, "t", now.Add(-3*time.Second), "{light}1", "{light}2", "{light}3")
	enqueueDue(t, s, "t", now.Add(-2*time.Second), "{heavy}1", "{heavy}2", "{heavy}3", "{heavy}4", "{heavy}5", "{heavy}6")
	if _, err := s.Move(ctx, 0, 1, 1000); err != nil {
		t.Fatal(err)
	}
	var order []string
	for range 3 {
		order = append(order, takeWindow(t, s, rdb, "t")...)
		if _, err := s.FairRefill(ctx, 0, "t"); err != nil {
			t.Fatal(err)
		}
	}
	// Five turns of heavy per one of light; heavy's first turn, cut by
	// the window's end after three, goes on for two at the next refill.
	want := []string{"{light}1", "{heavy}1", "{heavy}2", "{heavy}3", "{heavy}4", "{heavy}5", "{light}2", "{heavy}6", "{light}3"}
	if !slices.Equal(order, want) {
		t.Fatalf("order %v, want %v", order, want)
	}
	if w, err := s.KeyWeights(ctx, "t"); err != nil || w["heavy"] != 5 {
		t.Fatalf("weights %v %v", w, err)
	}
	if err := s.SetKeyWeight(ctx, "t", "heavy", 1); err != nil {
		t.Fatal(err)
	}
	if w, _ := s.KeyWeights(ctx, "t"); len(w) != 0 {
		t.Fatalf("weight 1 left a field: %v", w)
	}
	// Nothing is left behind once every key's list ran out.
	for _, k := range []string{s.k.FairRing(0, "t"), s.k.FairTurn(0, "t"), s.k.FairList(0, "t", "heavy")} {
		if n, _ := rdb.Exists(ctx, k).Result(); n != 0 {
			t.Errorf("%s left behind", k)
		}
	}
}

func TestKeyOf(t *testing.T) {
	t.Parallel()
	for id, want := range map[string]string{
		"{t-42}order": "t-42", "{t}": "t", "plain": "", "{}x": "", "{}x}": "", "{open": "", "x{a}": "", "{a}{b}": "a",
	} {
		if got := KeyOf(id); got != want {
			t.Errorf("KeyOf(%q) = %q, want %q", id, got, want)
		}
	}
	if id, err := KeyedID("tenant", "o-1"); err != nil || id != "{tenant}o-1" || KeyOf(id) != "tenant" {
		t.Fatalf("KeyedID: %q %v", id, err)
	}
	for _, k := range []string{"", "a}b", "a{b", "a|b", "a\nb", strings.Repeat("k", MaxKeyLen+1)} {
		if _, err := KeyedID(k, "x"); err == nil {
			t.Errorf("KeyedID(%q) accepted", k)
		}
	}
}

// TestMoverReachesEveryKeyOfAFairQueue: tasks due at one time move in id
// order, which puts one key's run before the keys that sort after it; the
// mover gives a fair queue's run at most its window a call and goes on
// after the run, so that the first call reaches every key. A plain
// queue's keyed tasks keep the id order.
func TestMoverReachesEveryKeyOfAFairQueue(t *testing.T) {
	t.Parallel()
	s, rdb := newFairStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	due := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	var big, plain []string
	for i := range 1000 {
		big = append(big, fmt.Sprintf("{big}%04d", i))
		plain = append(plain, fmt.Sprintf("{other}%04d", i))
	}
	quiet := []string{"{q1}x", "{q2}x", "{q3}x"}
	enqueueDue(t, s, "t", due, big...)
	enqueueDue(t, s, "t", due, quiet...)
	res, err := s.Move(ctx, 0, 1, 100)
	if err != nil {
		t.Fatal(err)
	}
	// The window (4) holds big's first and each quiet key's task.
	if got, want := takeWindow(t, s, rdb, "t"), []string{"{big}0000", "{q1}x", "{q2}x", "{q3}x"}; !slices.Equal(got, want) {
		t.Fatalf("window after the first move (%+v): %v, want %v", res, got, want)
	}
	if res.Moved != 4+3 {
		t.Errorf("first move moved %d, want the window's 4 of big and the 3 quiet", res.Moved)
	}
	// Once only big is due, a call moves it up to the park depth of its
	// list (16 windows); the rest stays in the delayed set, parked, and
	// the call reports no next due time: the owner sleeps instead of
	// calling again at once.
	res, err = s.Move(ctx, 0, 1, 100)
	// (its refill took a window's 4 of them).
	if n, _ := rdb.LLen(ctx, s.k.FairList(0, "t", "big")).Result(); err != nil || n != 64-4 || res.NextDue != -1 {
		t.Fatalf("second move: %+v, %v; big's list %d, want 60", res, err, n)
	}
	if n, _ := rdb.ZCard(ctx, s.k.Delayed(0)).Result(); n != int64(len(big))-4-61 {
		t.Fatalf("delayed set holds %d, want the %d parked", n, len(big)-4-61)
	}
	// Refills that bring the list below 4 windows wake the owner, once.
	wakes := listenWakes(t, ctx, rdb, s.Layout(), 0)
	for range 12 {
		takeWindow(t, s, rdb, "t")
		if _, err := s.FairRefill(ctx, 0, "t"); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := rdb.LLen(ctx, s.k.FairList(0, "t", "big")).Result(); n != 60-48 {
		t.Fatalf("big's list after 12 refills: %d", n)
	}
	wakes.one()
	if n, _ := rdb.Exists(ctx, s.k.FairParked(0, "t")).Result(); n != 0 {
		t.Fatalf("the key is still parked")
	}
	if res, err := s.Move(ctx, 0, 1, 100); err != nil || res.Moved != 64-12 {
		t.Fatalf("move after the wake-up: %+v, %v, want the 52 that fill the list again", res, err)
	}
	// A plain queue's keyed tasks keep the order of their ids.
	enqueueDue(t, s, "fifo", due, plain...)
	enqueueDue(t, s, "fifo", due, "{zz}x")
	for range 20 {
		if _, err := s.Move(ctx, 0, 1, 1000); err != nil {
			t.Fatal(err)
		}
	}
	got := takeWindow(t, s, rdb, "fifo")
	if len(got) != len(plain)+1 || got[len(got)-1] != "{zz}x" || !slices.IsSorted(got) {
		t.Fatalf("plain queue's order: %d tasks, last %q", len(got), got[len(got)-1])
	}
}

// one fails the test unless exactly one wake-up is pending.
func (w *wakes) one() {
	w.t.Helper()
	if _, err := w.sub.ReceiveMessage(w.ctx); err != nil {
		w.t.Fatalf("no wake-up: %v", err)
	}
	w.none()
}

// TestFairKeyPause: weight 0 pauses a key: its tasks wait while the other
// keys take every turn, also when it is the only key left; a weight above
// 0 resumes it and refills the window at once.
func TestFairKeyPause(t *testing.T) {
	t.Parallel()
	s, rdb := newFairStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	if err := s.SetKeyWeight(ctx, "t", "stop", 0); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	enqueueDue(t, s, "t", now.Add(-2*time.Second), "{stop}1", "{stop}2")
	enqueueDue(t, s, "t", now.Add(-time.Second), "{go}1", "{go}2")
	if _, err := s.Move(ctx, 0, 1, 1000); err != nil {
		t.Fatal(err)
	}
	if got, want := takeWindow(t, s, rdb, "t"), []string{"{go}1", "{go}2"}; !slices.Equal(got, want) {
		t.Fatalf("window with stop paused: %v, want %v", got, want)
	}
	if n, err := s.FairRefill(ctx, 0, "t"); err != nil || n != 0 {
		t.Fatalf("refill with only the paused key waiting: %d, %v", n, err)
	}
	if err := s.SetKeyWeight(ctx, "t", "stop", 1); err != nil {
		t.Fatal(err)
	}
	if got, want := takeWindow(t, s, rdb, "t"), []string{"{stop}1", "{stop}2"}; !slices.Equal(got, want) {
		t.Fatalf("window after the resume: %v, want %v", got, want)
	}
}

// TestMoverKeepsCallingForRunsNotParked: a run cut to the window while
// other runs are due is not parked: the call reports the next due time
// as now (the owner calls again at once) until every due task left is
// parked, and only then the time of the first task not yet due.
func TestMoverKeepsCallingForRunsNotParked(t *testing.T) {
	t.Parallel()
	s, rdb := newFairStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	due := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	for _, k := range []struct {
		key string
		n   int
	}{{"a", 200}, {"b", 50}, {"d", 200}} {
		var ids []string
		for i := range k.n {
			ids = append(ids, fmt.Sprintf("{%s}%03d", k.key, i))
		}
		enqueueDue(t, s, "t", due, ids...)
	}
	calls := 0
	for {
		res, err := s.Move(ctx, 0, 1, 100)
		if err != nil {
			t.Fatal(err)
		}
		calls++
		if res.NextDue == -1 {
			break
		}
		if res.NextDue > res.Now {
			t.Fatalf("call %d: next due %d after now %d while tasks are due", calls, res.NextDue, res.Now)
		}
		if calls > 100 {
			t.Fatalf("still due after 100 calls: %+v", res)
		}
	}
	// a and d are parked 16 windows deep (less the window's share the
	// refills took); b, shorter, moved whole.
	for key, want := range map[string]int64{"a": 64, "b": 50, "d": 64} {
		n, _ := rdb.LLen(ctx, s.k.FairList(0, "t", key)).Result()
		w, _ := rdb.LLen(ctx, s.k.Ready(0, "t")).Result()
		if n+w < want-4 || n > want {
			t.Errorf("%s's list holds %d (window %d), want about %d", key, n, w, want)
		}
	}
	// The rest of a and d waits parked (the window's 4 freed places that
	// later calls filled again).
	if n, _ := rdb.ZCard(ctx, s.k.Delayed(0)).Result(); n < 200+200-2*64-4 || n > 200+200-2*64 {
		t.Errorf("delayed set holds %d, want about the %d parked", n, 200+200-2*64)
	}
}

// TestPauseEndsASavedTurn: weight 0 takes effect at the next refill even
// when the window ended the key's turn and left it to go on.
func TestPauseEndsASavedTurn(t *testing.T) {
	t.Parallel()
	s, rdb := newFairStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	if err := s.SetKeyWeight(ctx, "t", "h", 6); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	enqueueDue(t, s, "t", now.Add(-2*time.Second), "{h}1", "{h}2", "{h}3", "{h}4", "{h}5", "{h}6", "{h}7")
	enqueueDue(t, s, "t", now.Add(-time.Second), "{l}1", "{l}2")
	if _, err := s.Move(ctx, 0, 1, 1000); err != nil {
		t.Fatal(err)
	}
	if got := takeWindow(t, s, rdb, "t"); len(got) != 4 || got[0] != "{h}1" {
		t.Fatalf("first window %v, want h's turn cut at 4", got)
	}
	if err := s.SetKeyWeight(ctx, "t", "h", 0); err != nil {
		t.Fatal(err)
	}
	if got, want := takeWindow(t, s, rdb, "t"), []string{"{l}1", "{l}2"}; !slices.Equal(got, want) {
		t.Fatalf("window after pausing h: %v, want %v", got, want)
	}
}

// TestChangeAWaitingTask: a fair queue's task waiting in its key's list
// is changed there: a new payload reaches the window the refill fills,
// and a later due time takes it back to the delayed set.
func TestChangeAWaitingTask(t *testing.T) {
	t.Parallel()
	s, rdb := newFairStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	now := time.Now()
	enqueueDue(t, s, "t", now.Add(-time.Second), "{k}1", "{k}2", "{k}3", "{k}4", "{k}5", "{k}6")
	if _, err := s.Move(ctx, 0, 1, 1000); err != nil {
		t.Fatal(err)
	}
	takeWindow(t, s, rdb, "t") // {k}1..4; 5 and 6 wait
	if _, err := s.Change(ctx, "{k}5", Change{Payload: []byte("NEW")}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Change(ctx, "{k}6", Change{SetDue: true, Due: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.FairRefill(ctx, 0, "t"); err != nil {
		t.Fatal(err)
	}
	v, err := rdb.LRange(ctx, s.k.Ready(0, "t"), 0, -1).Result()
	if err != nil || len(v) != 1 {
		t.Fatalf("window %v, %v; want {k}5 alone", v, err)
	}
	d, ok := s.Popped(0, v[0], time.Now(), time.Second)
	if !ok || d.Task.ID != "{k}5" || string(d.Task.Payload) != "NEW" {
		t.Fatalf("the window's entry carries %+v, want {k}5 with the new payload", d.Task)
	}
	if info, err := s.Lookup(ctx, "{k}6"); err != nil || info.State != "scheduled" {
		t.Fatalf("{k}6 after a later due time: %+v, %v", info, err)
	}
}

// TestFairnessTurnedOffDrains: a queue registered again without fairness
// has the tasks still waiting in its keys' lists moved to its ready list
// by the recovery pass, however long the ready list is.
func TestFairnessTurnedOffDrains(t *testing.T) {
	t.Parallel()
	s, rdb := newFairStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	var ids []string
	for i := range 20 {
		ids = append(ids, fmt.Sprintf("{k}%02d", i))
	}
	enqueueDue(t, s, "t", time.Now().Add(-time.Second), ids...)
	if _, err := s.Move(ctx, 0, 1, 1000); err != nil {
		t.Fatal(err)
	}
	if err := s.RegisterQueues(ctx, map[string]QueuePolicy{"t": {MaxRetries: 3, Timeout: 30 * time.Second, MaxPayload: 1024}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recover(ctx, 0, 1, RecoverArgs{Limit: 100}); err != nil {
		t.Fatal(err)
	}
	if got := takeWindow(t, s, rdb, "t"); !slices.Equal(got, ids) {
		t.Fatalf("ready list after the drain: %v, want all 20 in order", got)
	}
	if n, _ := rdb.Exists(ctx, s.k.FairRing(0, "t"), s.k.FairList(0, "t", "k")).Result(); n != 0 {
		t.Fatalf("%d fair keys left", n)
	}
}
