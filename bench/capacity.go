package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hourglass-sched/hourglass/internal/promread"
)

// capacityP99 is the steady capacity's bound: the highest rate at which
// |lateness| p99 stays within it (and nothing is lost).
const capacityP99 = 10.0 // ms

// steadyOnce produces rate tasks/s for dur, each due 1 s after it is
// produced, through a consumer of its own, and puts lateness and cost
// into r. With detail it adds the Hourglass notes (Redis time per
// command, the worker's and schedulers' own lateness metrics). It
// reports false when the consumer did not start.
func steadyOnce(ctx context.Context, sys system, rate int, dur time.Duration, r *row, detail bool) (summary, window, bool) {
	n := int(float64(rate) * dur.Seconds())
	sys.setPrefix(uniq("steady"))
	rec := newRecorder(n)
	stop, err := sys.startConsumer(ctx, rec)
	if err != nil {
		r.note("consumer: %v", err)
		return summary{}, window{}, false
	}
	defer func() {
		stop()
		_ = sys.clear(ctx)
	}()
	time.Sleep(500 * time.Millisecond)
	var mv0 promread.Histogram
	hgs, isHG := sys.(*hgSystem)
	if isHG && detail {
		mv0, _ = hgs.moveLateness(ctx)
	}
	a, _ := sys.snap(ctx)
	var errOnce sync.Once
	_, lag := produce(ctx, nil, sys, rate, n, time.Second, 16, producerFor(sys), func(err error) {
		errOnce.Do(func() { r.note("enqueue: %v", err) })
	})
	r.M["genlag"] = lag
	if lag > capacityP99/2 {
		r.note("the load generator fell behind: a tick's tasks waited %.1f ms (p99) for a sender, which counts as lateness", lag)
	}
	rec.wait(ctx, n, time.Now().Add(time.Second+10*time.Second))
	b, _ := sys.snap(ctx)
	s := rec.summarize(nil)
	putLat(r, s)
	w := diff(a, b)
	putCost(r, w, s.Handled)
	dropUnknown(sys, r)
	if !detail {
		return s, w, true
	}
	if isHG {
		r.note("%s", w.usecPerTask(int64(max(s.Handled, 1)), scriptCommands(hgs.e.root)))
	}
	if p50, p99, ok := sys.consumerLateness(); ok {
		r.note("worker metric (worker clock: pop − due, or start − due for a task held until due): p50 %.1f ms, p99 %.1f ms", 1000*p50, 1000*p99)
	}
	if isHG {
		if h, err := hgs.moveLateness(ctx); err == nil && h.Count > 0 {
			h = h.Sub(mv0)
			r.note("scheduler metric hourglass_move_lateness_seconds (Redis time at move − due, ms resolution, bucketed; moved ahead counts 0): p50 %.1f ms, p99 %.1f ms", 1000*h.Quantile(0.5), 1000*h.Quantile(0.99))
		}
	}
	return s, w, true
}

func capacityScenario(o sizes) *scenario {
	rates := make([]string, len(o.capRates))
	for i, r := range o.capRates {
		rates[i] = fmt.Sprint(r)
	}
	sc := &scenario{Name: "capacity", Title: fmt.Sprintf("Steady capacity: the highest rate at which |lateness| p99 stays ≤ %.0f ms, stepping %s tasks/s, %s a step, 1 s delays", capacityP99, strings.Join(rates, ", "), o.capStep),
		Cols: []col{{"cap", "capacity /s", "%.0f"}, {"rate", "rate /s", "%.0f"}, {"p50", "late p50 ms", "%.1f"}, {"p99", "p99 ms", "%.1f"},
			{"absp99", "|late| p99 ms", "%.1f"}, {"max", "max ms", "%.0f"}, {"early", "early", "%.0f"}, {"lost", "lost", "%.0f"},
			{"cmds", "redis cmds/task", "%.1f"}, {"rcpu_per_1k", "redis CPU µs/task", "%.1f"}, {"genlag", "gen. lag p99 ms", "%.1f"}}}
	sc.Notes = append(sc.Notes, fmt.Sprintf("a system's steps stop after its first failing one (|late| p99 > %.0f ms or a task lost); its first row gives the capacity (0: already over the bound at the lowest rate) and repeats the figures of the highest passing step, or of the failing one when none passed", capacityP99),
		"producers as in the steady scenario (Hourglass: one EnqueueBatch per 1 ms tick, from 4 goroutines; asynq: 8 goroutines, one call per task; BullMQ: 4 addBulk calls per tick); gen. lag = the p99 of how long a tick's tasks waited for a free sender in the load generator (time that counts as lateness but is not the system's); every system with its default configuration, asynq also tuned")
	return sc
}

// runCapacity steps each system through o.capRates and adds its rows to
// sc: a summary row named after the system, then one row per step.
func runCapacity(ctx context.Context, o sizes, sc *scenario, systems []system, logf func(string, ...any)) {
	for _, sys := range systems {
		var steps []row
		best, fail := -1, -1
		for _, rate := range o.capRates {
			if ctx.Err() != nil {
				return
			}
			r := row{System: fmt.Sprintf("%s @ %d/s", sys.name(), rate), M: map[string]float64{"rate": float64(rate)}}
			s, _, ok := steadyOnce(ctx, sys, rate, o.capStep, &r, false)
			steps = append(steps, r)
			pass := ok && s.Lost == 0 && s.AbsP99 <= capacityP99
			logf("capacity %s at %d/s: p50 %.1f p99 %.1f |p99| %.1f ms, lost %d, redis CPU %.1f µs/task: %s",
				sys.name(), rate, s.P50, s.P99, s.AbsP99, s.Lost, r.M["rcpu_per_1k"], map[bool]string{true: "within", false: "over"}[pass])
			if !pass {
				fail = len(steps) - 1
				break
			}
			best = len(steps) - 1
		}
		sum := row{System: sys.name(), M: map[string]float64{"cap": 0}}
		from := fail
		if best >= 0 {
			from = best
			sum.M["cap"] = steps[best].M["rate"]
		}
		if from >= 0 {
			for k, v := range steps[from].M {
				sum.M[k] = v
			}
			sum.Notes = append(sum.Notes, steps[from].Notes...)
		}
		if fail >= 0 {
			sum.note("over the bound at %.0f/s: |late| p99 %.1f ms, %.0f lost", steps[fail].M["rate"], steps[fail].M["absp99"], steps[fail].M["lost"])
		} else {
			sum.note("within the bound at every step: the capacity is at least the highest rate stepped")
		}
		sc.Rows = append(sc.Rows, sum)
		for _, st := range steps {
			st.Notes = nil
			sc.Rows = append(sc.Rows, st)
		}
	}
}

// inEnv runs f with a Hourglass of its own (Redis, etcd, two schedulers)
// started with eo; it reports why it could not.
func inEnv(ctx context.Context, logf func(string, ...any), eo envOpts, f func(hg *hgSystem)) error {
	e, err := startEnv(ctx, logf, eo)
	if err != nil {
		return err
	}
	defer e.stop()
	hg, err := newHG(e)
	if err != nil {
		return err
	}
	defer hg.close()
	if err := hg.warmUp(ctx); err != nil {
		return err
	}
	f(hg)
	return nil
}
