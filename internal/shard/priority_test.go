package shard

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// enqueueLevel enqueues ids to queue at level p, due at due.
func enqueueLevel(t *testing.T, s *Store, queue string, p Priority, due time.Time, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if r := s.Enqueue(testenv.Ctx(t, 10*time.Second), EnqueueArgs{ID: id, Queue: queue, Due: due, MaxRetries: 5, Priority: p}); r.Err != nil {
			t.Fatalf("enqueue %s: %v", id, r.Err)
		}
	}
}

func TestPriorityLevelsShareAKeysTurns(t *testing.T) {
	t.Parallel()
	s, rdb := newFairStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	due := time.Now().Add(-time.Second)
	ids := func(prefix string, n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("%s%02d", prefix, i))
		}
		return out
	}
	// Keyless tasks of a fair queue share the key "": their levels share
	// its turns. All due at once, normal and low first in due order.
	enqueueLevel(t, s, "t", PriorityLow, due.Add(-2*time.Millisecond), ids("l", 8)...)
	enqueueLevel(t, s, "t", PriorityNormal, due.Add(-time.Millisecond), ids("n", 16)...)
	enqueueLevel(t, s, "t", PriorityHigh, due, ids("h", 40)...)
	if res, err := s.Move(ctx, 0, 1, 1000); err != nil || res.Moved != 64 {
		t.Fatalf("move: %+v %v", res, err)
	}
	var order []string
	for len(order) < 64 {
		got := takeWindow(t, s, rdb, "t")
		if len(got) == 0 {
			if _, err := s.FairRefill(ctx, 0, "t"); err != nil {
				t.Fatal(err)
			}
			if got = takeWindow(t, s, rdb, "t"); len(got) == 0 {
				t.Fatalf("nothing left after %d of 64: %v", len(order), order)
			}
		}
		order = append(order, got...)
	}
	// Every 21 entries while all three wait: 16 high, 4 normal, 1 low.
	for start := 0; start+21 <= 42; start += 21 {
		n := map[byte]int{}
		for _, id := range order[start : start+21] {
			n[id[0]]++
		}
		if n['h'] != 16 || n['n'] != 4 || n['l'] != 1 {
			t.Fatalf("entries %d..%d: %v high/normal/low, want 16/4/1; order %v", start, start+20, n, order)
		}
	}
	// Within a level, due (here id) order.
	for _, p := range []string{"h", "n", "l"} {
		var lvl []string
		for _, id := range order {
			if strings.HasPrefix(id, p) {
				lvl = append(lvl, id)
			}
		}
		if !slices.IsSorted(lvl) {
			t.Fatalf("level %s out of order: %v", p, lvl)
		}
	}
	// Nothing is left waiting, and the stride state is gone with it.
	if n, err := rdb.Exists(ctx, s.k.FairRing(0, "t")+"|", s.k.FairRing(0, "t")+"||1", s.k.FairRing(0, "t")+"||2", s.k.FairLevels(0, "t")).Result(); err != nil || n != 0 {
		t.Fatalf("%d keys of the levels left, %v", n, err)
	}
}

// TestLowPriorityNotStarved: low tasks wait behind a stream of high
// tasks that never runs dry, and the n-th enters the window within 21·n
// of its key's entries, the bound docs/fairness.md states.
func TestLowPriorityNotStarved(t *testing.T) {
	t.Parallel()
	s, rdb := newFairStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	due := time.Now().Add(-time.Second)
	enqueueLevel(t, s, "t", PriorityHigh, due, "{k}h-a0", "{k}h-a1", "{k}h-a2", "{k}h-a3", "{k}h-a4", "{k}h-a5")
	if _, err := s.Move(ctx, 0, 1, 1000); err != nil {
		t.Fatal(err)
	}
	var order []string
	for round := range 40 {
		order = append(order, takeWindow(t, s, rdb, "t")...)
		if round == 2 {
			enqueueLevel(t, s, "t", PriorityLow, due, "{k}low1", "{k}low2", "{k}low3")
		}
		// Four more high tasks a round than the window takes: the high
		// level never runs dry.
		var more []string
		for i := range 8 {
			more = append(more, fmt.Sprintf("{k}h-%02d-%d", round, i))
		}
		enqueueLevel(t, s, "t", PriorityHigh, due, more...)
		if _, err := s.Move(ctx, 0, 1, 1000); err != nil {
			t.Fatal(err)
		}
	}
	first := 12 // entries taken before the low tasks were moved: 3 windows of 4
	for n := 1; n <= 3; n++ {
		at := slices.Index(order, fmt.Sprintf("{k}low%d", n))
		if at < 0 || at-first > 21*n {
			t.Fatalf("low task %d entered at %d (%d after it was moved), want within %d; order %v", n, at, at-first, 21*n, order)
		}
	}
}

func TestChangePriorityOfAWaitingTask(t *testing.T) {
	t.Parallel()
	s, rdb := newFairStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	due := time.Now().Add(-time.Second)
	enqueueLevel(t, s, "t", PriorityNormal, due, "n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7")
	if _, err := s.Move(ctx, 0, 1, 1000); err != nil {
		t.Fatal(err)
	}
	if got := takeWindow(t, s, rdb, "t"); !slices.Equal(got, []string{"n0", "n1", "n2", "n3"}) {
		t.Fatalf("first window %v", got)
	}
	if _, err := s.Change(ctx, "n7", Change{SetPriority: true, Priority: PriorityHigh}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.FairRefill(ctx, 0, "t"); err != nil {
		t.Fatal(err)
	}
	if got := takeWindow(t, s, rdb, "t"); !slices.Equal(got, []string{"n7", "n4", "n5", "n6"}) {
		t.Fatalf("after n7 became high: window %v, want n7 first", got)
	}
	info, err := s.Lookup(ctx, "n7")
	if err != nil || info.Task.Priority != PriorityHigh || info.Task.MaxRetries != 5 {
		t.Fatalf("n7: %+v %v, want high with its 5 retries", info.Task, err)
	}
	// A scheduled task keeps its new level through a retry.
	enqueueLevel(t, s, "t", PriorityNormal, time.Now().Add(time.Hour), "later")
	if _, err := s.Change(ctx, "later", Change{SetPriority: true, Priority: PriorityLow}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Change(ctx, "later", Change{SetDue: true, Delay: 0}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Move(ctx, 0, 1, 1000); err != nil {
		t.Fatal(err)
	}
	ds := claimWindow(t, s, rdb)
	if len(ds) != 1 || ds[0].Task.ID != "later" || ds[0].Task.Priority != PriorityLow {
		t.Fatalf("claimed %+v, want later at low", ds)
	}
	if _, err := s.Nack(ctx, ds[0].NackArgs(false, "boom")); err != nil {
		t.Fatal(err)
	}
	info, err = s.Lookup(ctx, "later")
	if err != nil || info.Task.Priority != PriorityLow || info.Task.Attempts != 1 || info.Task.MaxRetries != 5 {
		t.Fatalf("after a retry: %+v %v, want low, 1 attempt, 5 retries", info.Task, err)
	}
	if _, err := s.Change(ctx, "later", Change{SetPriority: true, Priority: 3}); err == nil {
		t.Fatal("level 3 accepted")
	}
}

func TestPriorityInTaskData(t *testing.T) {
	in := Task{ID: "x", Queue: "q", Attempts: 2, MaxRetries: 1000, Priority: PriorityLow, Timeout: time.Second,
		Due: time.UnixMilli(1700000000000), Enqueued: time.UnixMilli(1700000000001), Payload: []byte("p")}
	for name, blob := range map[string][]byte{"v1": Encode(in), "v2": EncodeV2(in, 7)} {
		out, err := DecodeWith("x", blob, func(uint16) (string, error) { return "q", nil })
		if err != nil || out.MaxRetries != 1000 || out.Priority != PriorityLow || out.Attempts != 2 || !bytes.Equal(out.Payload, in.Payload) {
			t.Fatalf("%s: %+v %v", name, out, err)
		}
	}
	// The scripts write and read it the same way.
	s, _ := newFairStore(t)
	ctx := testenv.Ctx(t, 10*time.Second)
	for _, p := range []Priority{PriorityHigh, PriorityNormal, PriorityLow} {
		id := "lvl-" + p.String()
		enqueueLevel(t, s, "fifo", p, time.Now().Add(time.Hour), id)
		info, err := s.Lookup(ctx, id)
		if err != nil || info.Task.Priority != p || info.Task.MaxRetries != 5 {
			t.Fatalf("%s: %+v %v", id, info.Task, err)
		}
	}
	if r := s.Enqueue(ctx, EnqueueArgs{ID: "bad", Queue: "fifo", MaxRetries: -1, Priority: 3}); r.Err == nil {
		t.Fatal("level 3 accepted by enqueue.lua")
	}
}
