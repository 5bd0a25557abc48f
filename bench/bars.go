package main

import (
	"fmt"
	"strings"
	"time"
)

// bars states each performance bar of BRIEF §5 as met or not.
func bars(r *report, ttl time.Duration) []bar {
	var out []bar
	add := func(name, target, value string, met, known bool) {
		out = append(out, bar{Name: name, Target: target, Value: value, Met: met, Known: known})
	}
	if s := r.find("steady"); s != nil {
		p50, ok1 := s.get("hourglass", "p50")
		p99, ok2 := s.get("hourglass", "p99")
		add("Lateness p50 at 2,000/s", "≤ 2 ms", fmt.Sprintf("%.1f ms", p50), ok1 && p50 <= 2, ok1)
		add("Lateness p99 at 2,000/s", "≤ 10 ms", fmt.Sprintf("%.1f ms", p99), ok2 && p99 <= 10, ok2)
	}
	if s := r.find("burst"); s != nil {
		v, ok := s.get("hourglass", "drain")
		add("Burst drain", "≥ 50,000 tasks/s", fmt.Sprintf("%.0f tasks/s", v), ok && v >= 50000, ok)
	}
	if s := r.find("enqueue"); s != nil {
		v, ok := s.get("hourglass", "g1")
		v8, _ := s.get("hourglass", "g8")
		add("Enqueue, batched, one client", "≥ 100,000 tasks/s", fmt.Sprintf("%.0f tasks/s (8 goroutines: %.0f)", v, v8), ok && v >= 100000, ok)
	}
	if s := r.find("idle"); s != nil {
		v, ok := s.get("hourglass", "cps")
		add("Idle, 16 shards, 1M future tasks", "≤ 20 Redis commands/s", fmt.Sprintf("%.1f commands/s", v), ok && v <= 20, ok)
		m, okm := s.get("hourglass", "mem")
		add("Memory per task beyond payload", "≤ 200 bytes", fmt.Sprintf("%.0f bytes", m), okm && m <= 200, okm)
	}
	if s := r.find("failover"); s != nil {
		k, ok := s.get("hourglass SIGKILL", "takeover")
		lim := float64((ttl + time.Second).Milliseconds())
		add("Failover after SIGKILL", fmt.Sprintf("≤ TTL + 1 s = %.0f ms", lim), fmt.Sprintf("%.0f ms", k), ok && k <= lim, ok)
		t, ok := s.get("hourglass SIGTERM", "takeover")
		add("Failover after SIGTERM", "≤ 200 ms", fmt.Sprintf("%.0f ms", t), ok && t <= 200, ok)
	}
	if s := r.find("cluster"); s != nil {
		v, met, ok := clusterBalance(s)
		add("Cluster balance, Redis CPU and commands", fmt.Sprintf("≤ %d%% on any node", clusterShareBar), v, met, ok)
	}
	// Ahead of asynq on every scenario: compare each headline figure
	// against every asynq configuration measured, for the default
	// deployment (16 shards) and, where the steady scenario also ran with
	// shards sized to its load, for that deployment too. A scenario counts
	// as won when one Hourglass deployment is ahead on all its figures.
	if v, met, ok := aheadOfAsynq(r); ok {
		add("Ahead of asynq on every scenario", "every comparison", v, met, true)
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
		for _, a := range []string{"asynq", "asynq-tuned"} {
			av, ok := s.get(a, c.key)
			if !ok {
				continue
			}
			checked++
			ahead := hv > av
			if !c.higher {
				ahead = hv < av
				if c.key == "p50" { // asynq may start tasks early: compare magnitudes
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
