package main

import (
	"fmt"
	"strings"
	"time"
)

// bars states each performance bar of BRIEF §5 as met or not, read
// from the default deployment's rows (16 shards, the default
// configuration). A quick run's sizes differ from the brief's: its bars
// are labelled not comparable.
func bars(r *report, ttl time.Duration, o sizes) []bar {
	var out []bar
	add := func(name, target, value string, met, known bool, quick string) {
		if !r.Meta.Quick {
			quick = ""
		}
		out = append(out, bar{Name: name, Target: target, Value: value, Met: met, Known: known, Quick: quick})
	}
	dur := fmt.Sprintf("%s of steady load, not 20 s", o.steadyDur)
	if s := r.find("steady"); s != nil {
		p50, ok1 := s.get("hourglass", "p50")
		p99, ok2 := s.get("hourglass", "p99")
		early, ok3 := s.get("hourglass", "early")
		add("Lateness p50 at 2,000/s", "≤ 1 ms", fmt.Sprintf("%.2f ms", p50), ok1 && p50 <= 1, ok1, dur)
		add("Lateness p99 at 2,000/s", "≤ 5 ms", fmt.Sprintf("%.2f ms", p99), ok2 && p99 <= 5, ok2, dur)
		add("Never early (2,000/s)", "0 tasks early", fmt.Sprintf("%.0f tasks early", early), ok3 && early == 0, ok3, dur)
		h, okh := s.get("hourglass", "rcpu_per_1k")
		a, oka := s.get("asynq", "rcpu_per_1k")
		v := fmt.Sprintf("%.1f µs/task vs asynq %.1f (ratio %.2f)", h, a, h/a)
		if t, ok := s.get("asynq-tuned", "rcpu_per_1k"); ok {
			v += fmt.Sprintf("; asynq-tuned %.1f", t)
		}
		if b, ok := s.get("bullmq", "rcpu_per_1k"); ok {
			v += fmt.Sprintf("; bullmq %.1f", b)
		}
		add("Redis CPU per task at 2,000/s, 16 shards", "≤ ½ asynq's (default config)", v, okh && oka && h <= a/2, okh && oka, dur)
	}
	if s := r.find("capacity"); s != nil {
		c16, ok16 := s.get("hourglass", "cap")
		c2, ok2 := s.get(fmt.Sprintf("hourglass, %d shards", 2), "cap")
		var all []string
		for _, rw := range s.Rows {
			if c, ok := rw.M["cap"]; ok {
				all = append(all, fmt.Sprintf("%s %.0f/s", rw.System, c))
			}
		}
		// A capacity at the top step is only a lower bound: the ratio is
		// known when the 2-shard capacity is below it, or both reach it.
		top := float64(o.capRates[len(o.capRates)-1])
		known := c2 < top || c16 >= top
		if !known {
			all = append(all, "2-shard capacity above the top step: ratio unknown")
		}
		add("Steady capacity, 16 vs 2 shards", "16-shard ≥ 80% of 2-shard", strings.Join(all, "; "), ok16 && ok2 && known && c16 >= 0.8*c2, ok16 && ok2,
			fmt.Sprintf("%s a step, not 10 s", o.capStep))
	}
	if s := r.find("burst"); s != nil {
		v, ok := s.get("hourglass", "drain")
		add("Burst drain", "≥ 100,000 tasks/s", fmt.Sprintf("%.0f tasks/s", v), ok && v >= 100000, ok, fmt.Sprintf("%d tasks, not 100,000", o.burstN))
	}
	if s := r.find("enqueue"); s != nil {
		v, ok := s.get("hourglass", "g1")
		val := fmt.Sprintf("%.0f tasks/s; unbatched, 64 goroutines:", v)
		for _, rw := range s.Rows {
			if u, ok := rw.M["u64"]; ok {
				val += fmt.Sprintf(" %s %.0f/s", rw.System, u)
			}
		}
		add("Enqueue, batched, one client", "≥ 100,000 tasks/s", val, ok && v >= 100000, ok, fmt.Sprintf("at most %d tasks or %s a run, not 300,000 or 6 s", o.enqMax, o.enqBound))
	}
	if s := r.find("idle"); s != nil {
		v, ok := s.get("hourglass", "cps")
		add("Idle, 16 shards, 1M future tasks", "≤ 1 Redis command/s", fmt.Sprintf("%.2f commands/s over %s", v, o.idleWin), ok && v <= 1, ok,
			fmt.Sprintf("%d tasks and a %s window, not 1,000,000 and %s", o.idleN, o.idleWin, idleWindow))
		m, okm := s.get("hourglass", "mem")
		add("Memory per task beyond payload", "≤ 150 bytes", fmt.Sprintf("%.0f bytes", m), okm && m <= 150, okm, fmt.Sprintf("%d tasks, not 1,000,000", o.idleN))
	}
	if s := r.find("noisy"); s != nil {
		q, ok := s.get("hourglass, fair", "q99")
		f, okf := s.get("hourglass, FIFO", "q99")
		add("Noisy neighbour: quiet keys' lateness p99, fair queue (#28)", "≤ 50 ms", fmt.Sprintf("%.1f ms (in due order: %.0f ms)", q, f), ok && q <= 50, ok && okf,
			fmt.Sprintf("%d tasks of one key and %d quiet keys, not 200,000 and 1,000", o.noisyBig, o.noisyQuiet))
	}
	if s := r.find("keys"); s != nil {
		k, ok1 := s.get("hourglass, fair queue, distinct keys", "rcpu")
		p, ok2 := s.get("hourglass, plain queue, no keys", "rcpu")
		m, okm := s.get("hourglass, fair queue, distinct keys", "mem")
		pm, _ := s.get("hourglass, plain queue, no keys", "mem")
		add("Scale of keys: Redis CPU per task, a key each, fair queue (#28)", "≤ +20% of no keys", fmt.Sprintf("%.1f against %.1f µs/task (%+.0f%%); %.0f bytes per key waiting", k, p, 100*(k/p-1), m-pm),
			ok1 && ok2 && k <= 1.2*p, ok1 && ok2 && okm, fmt.Sprintf("%d keys, not 100,000", o.keysN))
	}
	if s := r.find("failover"); s != nil {
		k, ok := s.get("hourglass SIGKILL", "takeover")
		lim := float64((ttl + time.Second).Milliseconds())
		add("Failover after SIGKILL", fmt.Sprintf("≤ TTL + 1 s = %.0f ms", lim), fmt.Sprintf("%.0f ms", k), ok && k <= lim, ok, "")
		t, ok := s.get("hourglass SIGTERM", "takeover")
		add("Failover after SIGTERM", "≤ 200 ms", fmt.Sprintf("%.0f ms", t), ok && t <= 200, ok, "")
	}
	if s := r.find("cluster"); s != nil {
		v, met, ok := clusterBalance(s)
		add("Cluster balance, Redis CPU and commands", fmt.Sprintf("≤ %d%% on any node", clusterShareBar), v, met, ok, "")
	}
	// Not a bar of §5 any more, kept as a summary: ahead of the peers on
	// every scenario, comparing each headline figure against every peer
	// measured, for the default deployment (16 shards) and, where the
	// steady scenario also ran with 2 shards, for that deployment too.
	if v, met, ok := aheadOfAsynq(r); ok {
		add("Ahead of asynq and BullMQ on every scenario (summary, not a §5 bar)", "every comparison", v, met, true, "")
	}
	return out
}

// cmp is one headline figure compared with asynq.
type cmp struct {
	scen, key, what string
	higher          bool
}

var asynqCmps = []cmp{
	{"burst", "drain", "burst drain/s", true},
	{"burst", "p99", "burst lateness p99", false},
	{"steady", "absp99", "steady |lateness| p99", false},
	{"steady", "p50", "steady lateness p50", false},
	{"steady", "rcpu_per_1k", "steady Redis CPU µs/task", false},
	{"enqueue", "g1", "enqueue/s 1 goroutine", true},
	{"enqueue", "g8", "enqueue/s 8 goroutines", true},
	{"enqueue", "u64", "enqueue/s unbatched, 64 goroutines", true},
	{"idle", "cps", "idle commands/s", false},
	{"idle", "mem", "memory/task", false},
	{"cost", "tput", "end-to-end tasks/s", true},
	{"cost", "cmds", "Redis commands/task", false},
	{"cost", "rcpu_per_1k", "Redis CPU µs/task end to end", false},
}

// compareRow compares the Hourglass row named system with both asynq
// configurations on the figures of cmps; it returns how many comparisons
// it made and the ones Hourglass lost.
func compareRow(r *report, system string, cmps []cmp) (checked int, lost []string) {
	for _, c := range cmps {
		s := r.find(c.scen)
		if s == nil {
			continue
		}
		hv, ok := s.get(system, c.key)
		if !ok {
			continue
		}
		for _, a := range []string{"asynq", "asynq-tuned", "bullmq"} {
			av, ok := s.get(a, c.key)
			if !ok {
				continue
			}
			checked++
			ahead := hv > av
			if !c.higher {
				ahead = hv < av
				if c.key == "p50" { // a peer may start tasks early: compare magnitudes
					ahead = abs(hv) < abs(av)
				}
			}
			if !ahead {
				lost = append(lost, fmt.Sprintf("%s: %.1f vs %s %.1f", c.what, hv, a, av))
			}
		}
	}
	return checked, lost
}

// cmpsOf returns the comparisons of one scenario.
func cmpsOf(scen string) []cmp {
	var out []cmp
	for _, c := range asynqCmps {
		if c.scen == scen {
			out = append(out, c)
		}
	}
	return out
}

// aheadOfAsynq states the asynq bar: the default deployment's
// comparisons, scenario by scenario, then the steady scenario's with
// sized shards, if it ran.
func aheadOfAsynq(r *report) (value string, met, ok bool) {
	checked, steadyFull := 0, 0
	var lost []string
	open := map[string]bool{} // scenarios the default deployment lost
	for _, c := range asynqCmps {
		if _, done := open[c.scen]; done {
			continue
		}
		n, l := compareRow(r, "hourglass", cmpsOf(c.scen))
		checked += n
		lost = append(lost, l...)
		open[c.scen] = len(l) > 0
		if c.scen == "steady" {
			steadyFull = n
		}
	}
	if checked == 0 {
		return "", false, false
	}
	value = fmt.Sprintf("%d shards: ahead on %d of %d comparisons", nShards, checked-len(lost), checked)
	if len(lost) > 0 {
		value += "; behind on " + strings.Join(lost, "; ")
	}
	// A sized deployment wins the steady scenario back only on all of its
	// figures.
	if s := r.find("steady"); s != nil {
		for _, row := range s.Rows {
			if !strings.HasPrefix(row.System, "hourglass, ") {
				continue
			}
			n, l := compareRow(r, row.System, cmpsOf("steady"))
			if n == 0 {
				continue
			}
			value += fmt.Sprintf(" — steady, %s: ahead on %d of %d", strings.TrimPrefix(row.System, "hourglass, "), n-len(l), n)
			switch {
			case len(l) > 0:
				value += " (behind on " + strings.Join(l, "; ") + ")"
			case n < steadyFull:
				value += " (figures missing)"
			default:
				open["steady"] = false
			}
		}
	}
	for _, o := range open {
		if o {
			return value, false, true
		}
	}
	return value, true, true
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
