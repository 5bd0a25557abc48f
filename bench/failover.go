package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// epochWatch polls a shard's fencing epoch in Redis every 2 ms; the new
// owner's first mover call stores its epoch, so a change marks the moment
// the shard is scanned again.
type epochWatch struct {
	mu      sync.Mutex
	changes []epochChange
}

type epochChange struct {
	at    time.Time
	epoch int64
}

func (w *epochWatch) run(ctx context.Context, e *env, sh int) {
	var last int64 = -1
	for ctx.Err() == nil {
		v, err := e.storedEpoch(ctx, sh)
		if err == nil && v != last {
			w.mu.Lock()
			w.changes = append(w.changes, epochChange{time.Now(), v})
			w.mu.Unlock()
			last = v
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// between lists the changes in (from, to].
func (w *epochWatch) between(from, to time.Time) []epochChange {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []epochChange
	for _, c := range w.changes {
		if c.at.After(from) && !c.at.After(to) {
			out = append(out, c)
		}
	}
	return out
}

// after returns the first change after t.
func (w *epochWatch) after(t time.Time) (epochChange, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.changes {
		if c.at.After(t) {
			return c, true
		}
	}
	return epochChange{}, false
}

func runFailover(ctx context.Context, o sizes, hg *hgSystem, logf func(string, ...any)) *scenario {
	hg.named = true // tasks are looked at by id
	defer func() { hg.named = false }()
	e := hg.e
	sc := &scenario{Name: "failover", Title: fmt.Sprintf("Failover: 3 schedulers, %d tasks/s due 1 s after production, lease TTL %s; the owner of shard 0 is stopped", o.steadyRate, e.ttl),
		Cols: []col{{"takeover", "shard scanned again after (ms)", "%.0f"}, {"gap", "gap in deliveries of shard (ms)", "%.0f"},
			{"spike", "max lateness, shard (ms)", "%.0f"}, {"p99w", "p99 lateness, shard, window (ms)", "%.1f"}, {"lost", "lost", "%.0f"}, {"dups", "dups", "%.0f"}}}
	sc.Notes = append(sc.Notes,
		"asynq has no equivalent: every asynq server forwards every queue's scheduled tasks itself, there is no ownership to fail over",
		"takeover = signal sent → the new owner's first mover call (its epoch appears in Redis key {hourglass:0}:epoch, polled every 2 ms); gap = longest pause between handler starts of shard-0 tasks around the stop; window = tasks of shard 0 due from 1 s before the stop to 1 s after the takeover",
		"lost/dups over the whole failover run (both stops)")
	if len(e.scheds) < 3 {
		if _, err := e.startSched(fmt.Sprintf("scheduler-%d", len(e.scheds)+1)); err != nil {
			sc.Notes = append(sc.Notes, "start third scheduler: "+err.Error())
			return sc
		}
	}
	if err := e.waitSettled(ctx, 30*time.Second); err != nil {
		sc.Notes = append(sc.Notes, err.Error())
		return sc
	}
	const sh = 0
	// Load for the whole scenario, with room to spare.
	maxDur := 4*e.ttl + 40*time.Second
	n := int(float64(o.steadyRate) * maxDur.Seconds())
	prefix := uniq("fo")
	hg.setPrefix(prefix)
	rec := newRecorder(n)
	stopW, err := hg.startConsumer(ctx, rec)
	if err != nil {
		sc.Notes = append(sc.Notes, err.Error())
		return sc
	}
	defer stopW()
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	var ew epochWatch
	go ew.run(wctx, e, sh)
	stopP := make(chan struct{})
	prodDone := make(chan int, 1)
	go func() {
		sent, _ := produce(ctx, stopP, hg, o.steadyRate, n, time.Second, 16, producer{senders: 1}, func(error) {})
		prodDone <- sent
	}()
	shardOf := make([]bool, n)
	for i := range shardOf {
		shardOf[i] = e.layout.ShardOf(prefix+"-"+strconv.Itoa(i)) == sh
	}
	time.Sleep(3 * time.Second) // steady state

	type phase struct {
		name   string
		sig    syscall.Signal
		t0     time.Time
		change epochChange
		ok     bool
	}
	var phases []*phase
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		own, _ := e.owners()
		owner := own[sh]
		if owner == nil {
			sc.Notes = append(sc.Notes, "shard 0 has no owner")
			break
		}
		name := map[syscall.Signal]string{syscall.SIGKILL: "hourglass SIGKILL", syscall.SIGTERM: "hourglass SIGTERM"}[sig]
		p := &phase{name: name, sig: sig, t0: time.Now()}
		_ = owner.Signal(sig)
		deadline := p.t0.Add(3*e.ttl + 5*time.Second)
		for time.Now().Before(deadline) {
			if p.change, p.ok = ew.after(p.t0); p.ok {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		phases = append(phases, p)
		logf("failover %s of %s: shard %d scanned again after %s", sigName(sig), owner.id, sh, p.change.at.Sub(p.t0).Round(time.Millisecond))
		time.Sleep(o.failoverAfter + time.Second) // tasks due during the gap are delivered
		wctx2, cancel := context.WithTimeout(ctx, 15*time.Second)
		_ = owner.Wait(wctx2)
		cancel()
		if err := owner.Restart(); err != nil {
			sc.Notes = append(sc.Notes, "restart "+owner.id+": "+err.Error())
			break
		}
		if err := e.waitSettled(ctx, 30*time.Second); err != nil {
			sc.Notes = append(sc.Notes, err.Error())
			break
		}
		time.Sleep(o.failoverAfter)
	}
	close(stopP)
	total := <-prodDone
	// Everything produced is due within 1 s; allow 10 s more.
	rec.wait(ctx, total, time.Now().Add(11*time.Second))

	for _, p := range phases {
		r := sc.row(p.name)
		if !p.ok {
			r.note("shard 0 not scanned again within %s", 3*e.ttl+5*time.Second)
			continue
		}
		end := p.change.at
		r.set("takeover", float64(end.Sub(p.t0).Milliseconds()))
		var ch []string
		for _, c := range ew.between(p.t0, end.Add(time.Second)) {
			ch = append(ch, fmt.Sprintf("+%d ms (epoch %d)", c.at.Sub(p.t0).Milliseconds(), c.epoch))
		}
		r.note("owner changes of shard 0 within 1 s of the first takeover: %s", strings.Join(ch, ", "))
		lo, hi := p.t0.Add(-time.Second).UnixNano(), end.Add(time.Second).UnixNano()
		var starts []int64
		var lat []float64
		for i := 0; i < total; i++ {
			if !shardOf[i] || rec.count[i] == 0 {
				continue
			}
			due := rec.start[i] - rec.late[i]
			if due >= lo && due <= hi {
				lat = append(lat, float64(rec.late[i])/1e6)
			}
			if rec.start[i] >= lo && rec.start[i] <= hi+int64(2*time.Second) {
				starts = append(starts, rec.start[i])
			}
		}
		slices.Sort(starts)
		var gap int64
		for i := 1; i < len(starts); i++ {
			gap = max(gap, starts[i]-starts[i-1])
		}
		slices.Sort(lat)
		r.set("gap", float64(gap)/1e6)
		if len(lat) > 0 {
			r.set("spike", lat[len(lat)-1])
			r.set("p99w", quant(lat, 0.99))
		}
	}
	s := rec.summarize(func(i int) bool { return i < total })
	for _, p := range phases {
		r := sc.row(p.name)
		r.set("lost", float64(s.Lost))
		r.set("dups", float64(s.Dups))
	}
	if len(phases) > 0 {
		sc.Notes = append(sc.Notes, fmt.Sprintf("all shards, whole run: lateness p50 %.1f ms, p99 %.1f ms, max %.0f ms over %d tasks", s.P50, s.P99, s.Max, s.Handled))
	}
	_ = hg.clear(ctx)
	return sc
}

func sigName(s syscall.Signal) string {
	if s == syscall.SIGKILL {
		return "SIGKILL"
	}
	return "SIGTERM"
}
