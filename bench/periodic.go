package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hourglass-sched/hourglass/internal/localrun"
	"github.com/hourglass-sched/hourglass/worker"
)

// periodicSchedules and periodicDur size the periodic scenario: that many
// schedules, each every second, for that long.
const (
	periodicSchedules = 200
	periodicDur       = 20 * time.Second
)

// runPeriodic measures periodic schedules end to end: its own Redis, etcd
// and two schedulers with 200 schedules firing every second (200
// occurrences/s), a worker in this process; lateness is handler start −
// occurrence, per occurrence, as the bars measure delayed tasks.
func runPeriodic(ctx context.Context, o sizes, logf func(string, ...any)) *scenario {
	sc := &scenario{Name: "periodic", Title: fmt.Sprintf("Periodic schedules: %d schedules every second for %s (2 schedulers, 16 shards), lateness = handler start − occurrence", periodicSchedules, periodicDur),
		Cols: []col{{"occ", "occurrences", "%.0f"}, {"rate", "fired/s", "%.0f"}, {"p50", "late p50 ms", "%.1f"}, {"p99", "late p99 ms", "%.1f"},
			{"max", "max ms", "%.1f"}, {"gaps", "gaps", "%.0f"}, {"dups", "dups", "%.0f"}, {"cmds", "redis cmds/occurrence", "%.1f"},
			{"cpu", "redis CPU µs/occurrence", "%.1f"}}}
	r := sc.row("hourglass")
	e, err := newEnv(ctx, logf, nShards)
	if err != nil {
		sc.Notes = append(sc.Notes, "env: "+err.Error())
		return sc
	}
	defer e.stop()
	if e.hgRed, err = localrun.StartRedis(e.dir); err != nil {
		sc.Notes = append(sc.Notes, "redis: "+err.Error())
		return sc
	}
	e.hgAdmin = e.dial(e.hgAdminN)
	for i := range periodicSchedules {
		name := "p" + strconv.Itoa(i)
		e.schedArgs = append(e.schedArgs, "-set", "periodic."+name+".queue="+hgQueue, "-set", "periodic."+name+".interval=1s")
	}
	if err := e.startSchedulers(ctx); err != nil {
		sc.Notes = append(sc.Notes, "schedulers: "+err.Error())
		return sc
	}
	type occ struct {
		name string
		at   int64 // occurrence, unix ms
	}
	var mu sync.Mutex
	late := map[occ][]float64{} // handler starts per occurrence, ms after it
	rdb := e.dial(nil)
	defer rdb.Close()
	w, err := worker.New(rdb, workerConfig(e.shards, prometheus.NewRegistry()))
	if err == nil {
		err = w.Handle(hgQueue, func(_ context.Context, t *worker.Task) error {
			now := time.Now()
			name, rest, _ := strings.Cut(t.ID, "@")
			rest, _, _ = strings.Cut(rest, "~")
			ms, _ := strconv.ParseInt(rest, 10, 64)
			mu.Lock()
			k := occ{name, ms}
			late[k] = append(late[k], float64(now.Sub(time.UnixMilli(ms)).Microseconds())/1000)
			mu.Unlock()
			return nil
		}, queueOptions(concurrency))
	}
	if err != nil {
		sc.Notes = append(sc.Notes, "worker: "+err.Error())
		return sc
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(wctx) }()
	before, _ := snapshot(ctx, e.hgAdmin, newCmdCounter(), nil, nil)
	start := time.Now()
	select {
	case <-ctx.Done():
	case <-time.After(periodicDur): // timed phase: the schedules fire
	}
	after, _ := snapshot(ctx, e.hgAdmin, newCmdCounter(), nil, nil)
	elapsed := time.Since(start)
	<-time.After(2 * time.Second) // timed phase: the last occurrences' tasks run
	cancel()
	<-done

	mu.Lock()
	defer mu.Unlock()
	// Count the occurrences of the measured window per schedule: each
	// whole second between the schedule's first and last delivered
	// occurrence must have exactly one task.
	first, last, count := map[string]int64{}, map[string]int64{}, map[string]int{}
	var lat []float64
	dups := 0
	for k, starts := range late {
		if f, ok := first[k.name]; !ok || k.at < f {
			first[k.name] = k.at
		}
		if k.at > last[k.name] {
			last[k.name] = k.at
		}
		count[k.name]++
		lat = append(lat, starts[0])
		dups += len(starts) - 1
	}
	gaps := 0
	for name, f := range first {
		gaps += int((last[name]-f)/1000+1) - count[name]
	}
	sort.Float64s(lat)
	n := float64(len(lat))
	r.M["occ"] = n
	r.M["rate"] = n / elapsed.Seconds()
	r.M["p50"] = quant(lat, 0.5)
	r.M["p99"] = quant(lat, 0.99)
	if len(lat) > 0 {
		r.M["max"] = lat[len(lat)-1]
	}
	r.M["gaps"] = float64(gaps)
	r.M["dups"] = float64(dups)
	if c := after.processed - before.processed; n > 0 && c > 0 {
		r.M["cmds"] = float64(c) / n
	}
	if cpu := after.cpu - before.cpu; n > 0 && cpu > 0 {
		r.M["cpu"] = 1e6 * cpu / n
	}
	sc.Notes = append(sc.Notes,
		"occurrences = distinct (schedule, occurrence) tasks run; gaps = whole seconds without a task between a schedule's first and last; dups = extra handler runs of an occurrence",
		"redis cmds/occurrence: total_commands_processed over the window (fire, move, pop, ack and the schedulers' other loops) ÷ occurrences; redis CPU µs/occurrence: used_cpu_sys + used_cpu_user over the same window ÷ occurrences; the bars for delayed tasks (p50 ≤ 2 ms, p99 ≤ 10 ms at 2,000/s) apply",
		fmt.Sprintf("fire lead %s: an occurrence's task is stored ahead and moved by the mover when due (docs/periodic.md); worker concurrency %d, as in the other scenarios", "500ms", concurrency))
	logf("periodic: %.0f occurrences, p50 %.1f ms p99 %.1f ms, gaps %d dups %d", n, quant(lat, 0.5), quant(lat, 0.99), gaps, dups)
	return sc
}
