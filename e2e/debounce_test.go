package e2e_test

import (
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/internal/scan"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestDebounceOneKeyFromManyProducers (#27): 1,000 calls of one key from
// 10 goroutines over 2 s, trailing, Delay 500 ms, MaxWait 1 s, through a
// scheduler and an HTTP worker binary. Every call lands in one window;
// each window runs exactly one task, with the payload of its last call
// (the call of the highest turn), due no later than its first call +
// MaxWait (server time); a window opens once the previous one's task is
// due, or taken by a worker (at most scheduler.prefetch before). The
// windows are printed.
func TestDebounceOneKeyFromManyProducers(t *testing.T) {
	testenv.Parallel(t)
	c := newCluster(t)
	tg := newTarget(t)
	args := workerArgs(tg.URL, 30*time.Second, 16)
	c.start("s-1", args...)
	testenv.WaitFor(t, 20*time.Second, "1 replica owns the 16 shards", func() (bool, string) { return c.settled("s-1") })
	c.startWorker("w-1", args...)
	ctx := testenv.Ctx(t, 2*time.Minute)

	const delay, maxWait = 500 * time.Millisecond, time.Second
	const prefetch = scan.DefaultPrefetch // scheduler.prefetch
	d := client.Debounce{Key: "customer-42", Delay: delay, MaxWait: maxWait}
	type call struct {
		payload string
		r       client.DebounceResult
	}
	var mu sync.Mutex
	var calls []call
	var wg sync.WaitGroup
	start := time.Now()
	for g := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				// 100 calls over 2 s per goroutine (a load pattern, not a wait).
				if pause := time.Until(start.Add(time.Duration(i) * 20 * time.Millisecond)); pause > 0 {
					time.Sleep(pause)
				}
				p := fmt.Sprintf("g%d-%d", g, i)
				r, err := c.cli.Debounce(ctx, d, client.Task{Queue: "default", Payload: []byte(p)})
				if err != nil {
					t.Errorf("call %s: %v", p, err)
					return
				}
				mu.Lock()
				calls = append(calls, call{p, r})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()

	// The windows, by task: their calls, last payload and final due time.
	type window struct {
		id              string
		calls, maxTurn  int
		last            string
		firstDue, final time.Time // the first call's due (its time + Delay) and the last call's
	}
	byID := map[string]*window{}
	for _, cl := range calls {
		if cl.r.Outcome != client.Created && cl.r.Outcome != client.Changed {
			t.Fatalf("call %s: %+v, want created or changed (trailing drops nothing)", cl.payload, cl.r)
		}
		w := byID[cl.r.ID]
		if w == nil {
			w = &window{id: cl.r.ID}
			byID[cl.r.ID] = w
		}
		w.calls++
		if cl.r.Turn == 1 {
			w.firstDue = cl.r.Due
		}
		if cl.r.Turn > w.maxTurn {
			w.maxTurn, w.last, w.final = cl.r.Turn, cl.payload, cl.r.Due
		}
	}
	ws := make([]*window, 0, len(byID))
	for _, w := range byID {
		ws = append(ws, w)
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i].final.Before(ws[j].final) })
	testenv.WaitFor(t, 30*time.Second, "every window's task delivered", func() (bool, string) {
		tg.mu.Lock()
		defer tg.mu.Unlock()
		n := 0
		for _, w := range ws {
			if tg.count[w.id] > 0 {
				n++
			}
		}
		return n == len(ws), fmt.Sprintf("%d of %d", n, len(ws))
	})
	tg.mu.Lock()
	defer tg.mu.Unlock()
	total := 0
	for k, w := range ws {
		total += w.calls
		first := w.firstDue.Add(-delay) // the window's first call, on Redis's clock
		t.Logf("window %d: task %s, %d calls from %s, runs at %s with %q (turn %d)", k+1, w.id, w.calls,
			first.Format("15:04:05.000"), w.final.Format("15:04:05.000"), w.last, w.maxTurn)
		switch {
		case w.calls != w.maxTurn:
			t.Errorf("window %s: %d calls but turns up to %d", w.id, w.calls, w.maxTurn)
		case tg.count[w.id] != 1:
			t.Errorf("window %s: its task ran %d times", w.id, tg.count[w.id])
		case tg.payload[w.id] != w.last:
			t.Errorf("window %s ran with %q, want its last call's %q", w.id, tg.payload[w.id], w.last)
		case !tg.due[w.id].Equal(w.final):
			t.Errorf("window %s ran due %v, want %v", w.id, tg.due[w.id], w.final)
		case w.final.After(first.Add(maxWait)):
			t.Errorf("window %s is due %v, after its first call + MaxWait (%v)", w.id, w.final, first.Add(maxWait))
		case k > 0 && first.Before(ws[k-1].final.Add(-prefetch)):
			// A worker takes a task up to scheduler.prefetch before it is
			// due; a call after that opens the next window.
			t.Errorf("window %s opened at %v, more than the prefetch before the previous window's task was due (%v)", w.id, first, ws[k-1].final)
		}
	}
	if total != 1000 {
		t.Errorf("%d calls in windows, want 1000", total)
	}
	if len(ws) < 2 {
		t.Errorf("%d windows for 2 s of calls with MaxWait 1 s; want at least 2", len(ws))
	}
}
