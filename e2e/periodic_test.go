package e2e_test

import (
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/hourglass-sched/hourglass/internal/promread"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// periodicArgs declares schedule name for the scheduler binary: kv are
// key, value pairs of its periodic.<name> section.
func periodicArgs(name string, kv ...string) []string {
	var out []string
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, "-set", "periodic."+name+"."+kv[i]+"="+kv[i+1])
	}
	return out
}

// occurrenceOf parses a periodic task id, "<name>@<unix ms>" optionally
// followed by "~k" (shard.Layout.OccurrenceID).
func occurrenceOf(id string) (name string, ms int64, ok bool) {
	name, rest, ok := strings.Cut(id, "@")
	if !ok {
		return "", 0, false
	}
	rest, _, _ = strings.Cut(rest, "~")
	ms, err := strconv.ParseInt(rest, 10, 64)
	return name, ms, err == nil
}

// ids returns the distinct task ids the target received.
func (tg *target) ids() []string {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	out := make([]string, 0, len(tg.count))
	for id := range tg.count {
		out = append(out, id)
	}
	return out
}

// occurrences returns schedule name's delivered occurrences (unix ms),
// each with the distinct task ids delivered for it.
func (tg *target) occurrences(name string) map[int64][]string {
	out := map[int64][]string{}
	for _, id := range tg.ids() {
		if n, ms, ok := occurrenceOf(id); ok && n == name {
			out[ms] = append(out[ms], id)
		}
	}
	return out
}

// waitQuietly waits up to timeout for cond and returns either way: the
// checks that follow name what is still wrong.
func waitQuietly(timeout time.Duration, cond func() bool) {
	for deadline := time.Now().Add(timeout); !cond() && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
}

// sortedKeys returns m's occurrences in order.
func sortedKeys(m map[int64][]string) []int64 {
	ks := make([]int64, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// TestPeriodicExactlyOncePerOccurrence: a schedule firing every second
// while the owner of its home shard is SIGKILLed or SIGTERMed every few
// seconds (and restarted) delivers one task per occurrence, none missing
// and none twice, with the default catch-up policy skip: an occurrence
// that falls due while a SIGKILLed owner's lease expires is within the
// misfire grace (scheduler.misfire_grace, a minute) and fired late by the
// new owner, not skipped. Four faults (two of each kind, at four phases
// against the occurrences) prove it; TestSoakPeriodicExactlyOncePerOccurrence
// repeats them for three minutes.
func TestPeriodicExactlyOncePerOccurrence(t *testing.T) {
	testenv.Parallel(t)
	testPeriodicFaults(t, 4, 0)
}

// TestSoakPeriodicExactlyOncePerOccurrence is the long form of
// TestPeriodicExactlyOncePerOccurrence: faults for three minutes.
func TestSoakPeriodicExactlyOncePerOccurrence(t *testing.T) {
	testenv.SkipUnlessSoak(t)
	testenv.Parallel(t)
	testPeriodicFaults(t, 0, 3*time.Minute)
}

// testPeriodicFaults SIGKILLs and SIGTERMs (in turn) the owner of a
// schedule's home shard faults times, or for soak if faults is 0, and
// checks that every occurrence from the first delivered to one fired
// after the replicas settled again was delivered once.
func testPeriodicFaults(t *testing.T, faults int, soak time.Duration) {
	c := newCluster(t)
	tg := newTarget(t)
	args := workerArgs(tg.URL, 5*time.Second, 4)
	sargs := append(slices.Clone(args), periodicArgs("tick", "queue", "default", "interval", "1s")...) // catch_up skip
	ids := []string{"pe-a", "pe-b", "pe-c"}
	scheds := map[string]*sched{}
	for _, id := range ids {
		scheds[id] = c.start(id, sargs...)
	}
	c.startWorker("pe-w", args...)
	testenv.WaitFor(t, 20*time.Second, "3 replicas share the shards", func() (bool, string) { return c.settled(ids...) })
	home := c.store.Layout().HomeShard("tick")

	start := time.Now()
	kills, terms := 0, 0
	for i := 0; faults > 0 && i < faults || faults == 0 && time.Since(start) < soak; i++ {
		time.Sleep(time.Duration(1500+i%4*500) * time.Millisecond) // vary the phase against the occurrences
		// A rebalance (the last victim is back) hands shards over with
		// a short gap: wait for the home shard's owner.
		var id string
		testenv.WaitFor(t, 10*(ttl+time.Second), "the home shard owned", func() (bool, string) {
			own, _ := c.owners()
			id = own[home]
			return scheds[id] != nil, fmt.Sprintf("shard %d owned by %q", home, id)
		})
		p := scheds[id]
		if i%2 == 0 {
			p.Kill()
			kills++
		} else {
			if err := p.Terminate(10 * time.Second); err != nil {
				t.Fatalf("SIGTERMed %s: %v", id, err)
			}
			terms++
		}
		testenv.WaitFor(t, 10*(ttl+time.Second), "home shard taken over", func() (bool, string) {
			return c.takenOver(id, []int{home})
		})
		p.Restart()
	}
	testenv.WaitFor(t, 20*time.Second, "3 replicas share the shards", func() (bool, string) { return c.settled(ids...) })
	// Every occurrence up to one after the shards settled again is
	// delivered (or the check below names the missing ones): the faults'
	// hand-overs are all behind it.
	settled := time.Now().UnixMilli()
	waitQuietly(20*time.Second, func() bool {
		ks := sortedKeys(tg.occurrences("tick"))
		return len(ks) > 0 && ks[len(ks)-1] > settled && len(ks) == int((ks[len(ks)-1]-ks[0])/1000)+1
	})

	occ := tg.occurrences("tick")
	ks := sortedKeys(occ)
	if len(ks) < 2 {
		t.Fatalf("%d occurrences delivered", len(ks))
	}
	expected := int((ks[len(ks)-1]-ks[0])/1000) + 1
	gaps, dups, tasks, offGrid := 0, 0, 0, 0
	for _, ms := range ks {
		if ms%1000 != 0 {
			offGrid++
		}
		tasks += len(occ[ms])
		if len(occ[ms]) > 1 {
			dups += len(occ[ms]) - 1
			t.Errorf("occurrence %d delivered as %d tasks: %v", ms, len(occ[ms]), occ[ms])
		}
	}
	var missing []int64
	for ms := ks[0]; ms <= ks[len(ks)-1]; ms += 1000 {
		if _, ok := occ[ms]; !ok {
			gaps++
			missing = append(missing, ms)
		}
	}
	distinct, total := tg.delivered()
	t.Logf("%d SIGKILLs, %d SIGTERMs in %s; occurrences expected %d, tasks %d, gaps %d, duplicates %d (deliveries %d of %d tasks)",
		kills, terms, time.Since(start).Round(time.Second), expected, tasks, gaps, dups, total, distinct)
	if gaps != 0 {
		t.Errorf("%d occurrences never delivered: %v", gaps, missing)
	}
	if offGrid != 0 {
		t.Errorf("%d occurrences not on whole seconds", offGrid)
	}
}

// TestPeriodicCatchUpPolicies: the occurrences missed while the only
// scheduler was stopped are fired by the catch-up policy when it comes
// back: none with skip, the latest with latest, every one with all. The
// misfire grace is the least (2 s) and the outage longer, so that the
// policy, not the grace, decides (TestMisfireGraceDecidesBeforeThePolicy
// in internal/fire covers the grace).
func TestPeriodicCatchUpPolicies(t *testing.T) {
	testenv.Parallel(t)
	c := newCluster(t)
	tg := newTarget(t)
	args := workerArgs(tg.URL, 5*time.Second, 4)
	sargs := append(slices.Clone(args), "-set", "scheduler.misfire_grace=2s")
	policies := []string{"skip", "latest", "all"}
	for _, p := range policies {
		sargs = append(sargs, periodicArgs("cu-"+p, "queue", "default", "interval", "1s",
			"catch_up", p, "catch_up_window", "1m")...)
	}
	s := c.start("cu-s", sargs...)
	c.startWorker("cu-w", args...)
	testenv.WaitFor(t, 20*time.Second, "replica owns all shards", func() (bool, string) { return c.settled("cu-s") })
	testenv.WaitFor(t, 20*time.Second, "3 occurrences of each schedule delivered", func() (bool, string) {
		for _, p := range policies {
			if n := len(tg.occurrences("cu-" + p)); n < 3 {
				return false, fmt.Sprintf("cu-%s: %d", p, n)
			}
		}
		return true, ""
	})
	if err := s.Terminate(10 * time.Second); err != nil {
		t.Fatalf("SIGTERMed scheduler: %v", err)
	}
	ctx := testenv.Ctx(t, time.Minute)
	last := map[string]int64{}
	for _, p := range policies {
		name := "cu-" + p
		l, err := c.store.LastRecorded(ctx, c.store.Layout().HomeShard(name))
		if err != nil {
			t.Fatal(err)
		}
		last[name] = l[name].UnixMilli()
	}
	// Stopped for five occurrences: enough to tell every one (all) from
	// the latest and from none (skip).
	const stopped = 5
	time.Sleep(stopped * time.Second) // the outage, a timed phase
	restart := time.Now().UnixMilli()
	s.Restart()
	testenv.WaitFor(t, 20*time.Second, "replica owns all shards again", func() (bool, string) { return c.settled("cu-s") })
	// Each schedule fires in time again, and all has delivered what it
	// caught up (the checks below say what is missing otherwise).
	waitQuietly(10*time.Second, func() bool {
		for _, p := range policies {
			ks := sortedKeys(tg.occurrences("cu-" + p))
			if len(ks) == 0 || ks[len(ks)-1] <= restart+1000 {
				return false
			}
			if p == "all" && len(ks) < 3+stopped {
				return false
			}
		}
		return true
	})

	fams, err := promread.Families(ctx, "http://"+s.http+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	caughtUp := labelled(fams, "hourglass_periodic_caught_up_total", "schedule")
	for _, p := range policies {
		name := "cu-" + p
		occ := tg.occurrences(name)
		var after []int64 // delivered occurrences after the last one before the stop
		for _, ms := range sortedKeys(occ) {
			if ms > last[name] {
				after = append(after, ms)
			}
		}
		if len(after) == 0 {
			t.Errorf("%s: nothing delivered after the restart", name)
			continue
		}
		// Occurrences at or before the restart were missed for sure; the
		// scheduler takes a moment more to own the shard, so the metric
		// says how many the policy fired.
		inStop := 0
		for _, ms := range after {
			if ms <= restart {
				inStop++
			}
		}
		gapsAfter := 0
		for i := 1; i < len(after); i++ {
			if after[i]-after[i-1] != 1000 {
				gapsAfter++
			}
		}
		missed := (after[0] - last[name]) / 1000 // occurrences between the last before the stop and the first after
		n := caughtUp[name]
		t.Logf("%s: last before stop %d, first after %d (%d s later), delivered in the stopped window %d, caught up %v, gaps after %d",
			name, last[name], after[0], missed, inStop, n, gapsAfter)
		if gapsAfter != 0 {
			t.Errorf("%s: %d gaps after the restart: %v", name, gapsAfter, after)
		}
		switch p {
		case "skip":
			if inStop != 0 || n != 0 || missed < stopped {
				t.Errorf("skip fired %d occurrences of the stopped window (caught up %v, first %d s after the last)", inStop, n, missed)
			}
		case "latest":
			// The one caught up is the first delivered (the rest follow
			// without gaps), the latest at the restart.
			if n != 1 || missed < stopped || after[0] < restart-1000 {
				t.Errorf("latest: caught up %v, want 1; first after %d s, at %d ms from the restart", n, missed, after[0]-restart)
			}
		case "all":
			if missed != 1 || n < stopped || inStop < stopped || float64(inStop) > n {
				t.Errorf("all: first after %d s, caught up %v, delivered in the stopped window %d, want every one (about %d)", missed, n, inStop, stopped)
			}
		}
	}
}

// labelled returns counter family name in fams by the value of label.
func labelled(fams map[string]*dto.MetricFamily, name, label string, match ...string) map[string]float64 {
	out := map[string]float64{}
	f := fams[name]
	if f == nil {
		return out
	}
next:
	for _, m := range f.Metric {
		key := ""
		for _, lp := range m.GetLabel() {
			if lp.GetName() == label {
				key = lp.GetValue()
			}
			for i := 0; i+1 < len(match); i += 2 {
				if lp.GetName() == match[i] && lp.GetValue() != match[i+1] {
					continue next
				}
			}
		}
		out[key] += m.GetCounter().GetValue()
	}
	return out
}

// TestPeriodicOverlapSkip: with overlap skip, an occurrence is skipped
// while the previous task still runs, so the handler runs of a schedule
// whose handler outlasts its interval never overlap.
func TestPeriodicOverlapSkip(t *testing.T) {
	testenv.Parallel(t)
	c := newCluster(t)
	tg := newTarget(t)
	type run struct {
		id         string
		start, end time.Time
	}
	var mu sync.Mutex
	var runs []run
	tg.setBehave(func(w http.ResponseWriter, r *http.Request, id string, attempt int) bool {
		st := time.Now()
		time.Sleep(2500 * time.Millisecond)
		mu.Lock()
		runs = append(runs, run{id, st, time.Now()})
		mu.Unlock()
		return false
	})
	args := workerArgs(tg.URL, 10*time.Second, 4)
	s := c.start("ov-s", append(slices.Clone(args), periodicArgs("slow", "queue", "default", "interval", "1s", "overlap", "skip")...)...)
	c.startWorker("ov-w", args...)
	testenv.WaitFor(t, 20*time.Second, "replica owns all shards", func() (bool, string) { return c.settled("ov-s") })
	// Three runs of 2.5 s on a 1 s interval: two or more occurrences to
	// skip during each run but the last.
	testenv.WaitFor(t, 30*time.Second, "3 runs of the schedule", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(runs) >= 3, fmt.Sprintf("%d runs", len(runs))
	})
	mu.Lock()
	rs := slices.Clone(runs)
	mu.Unlock()
	sort.Slice(rs, func(i, j int) bool { return rs[i].start.Before(rs[j].start) })
	overlaps := 0
	for i := 1; i < len(rs); i++ {
		if rs[i].start.Before(rs[i-1].end) {
			overlaps++
			t.Errorf("%s started %s before %s ended", rs[i].id, rs[i-1].end.Sub(rs[i].start).Round(time.Millisecond), rs[i-1].id)
		}
	}
	ctx := testenv.Ctx(t, 10*time.Second)
	fams, err := promread.Families(ctx, "http://"+s.http+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	skipped := labelled(fams, "hourglass_periodic_skipped_total", "schedule", "reason", "overlap")["slow"]
	t.Logf("%d runs, %d overlapping, %v occurrences skipped for overlap", len(rs), overlaps, skipped)
	if skipped == 0 {
		t.Error("no occurrence skipped for overlap")
	}
}
