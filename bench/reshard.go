package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/internal/localrun"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/worker"
)

// Sizes of the reshard scenario: a backlog half in the delayed sets, half
// in the far tier, and a steady load whose lateness is measured before,
// during and after the change.
const (
	reshardBacklog = 200_000
	reshardRate    = 1000 // tasks/s of steady load, delays 0-2 s
	reshardTo      = 32
)

// runReshard measures a change of the shard count 16 -> 32 with two
// schedulers: the reshard rate of a backlog (tasks moved ÷ the change's
// duration, by the layout record) and the lateness of a steady load
// before and during the change.
func runReshard(ctx context.Context, logf func(string, ...any)) *scenario {
	sc := &scenario{Name: "reshard", Title: fmt.Sprintf("Changing the shard count 16 -> %d online: %d tasks stored (half in the delayed sets, half in the far tier), %d tasks/s of load (2 schedulers)", reshardTo, reshardBacklog, reshardRate),
		Cols: []col{{"moved", "tasks moved", "%.0f"}, {"secs", "change s", "%.2f"}, {"rate", "moved/s", "%.0f"},
			{"b50", "late p50 before ms", "%.1f"}, {"b99", "p99 before ms", "%.1f"}, {"d50", "p50 during ms", "%.1f"}, {"d99", "p99 during ms", "%.1f"},
			{"lost", "lost", "%.0f"}, {"dups", "dups", "%.0f"}}}
	for _, rate := range []int{5000, 0} {
		name := fmt.Sprintf("reshard_rate %d", rate)
		if rate == 0 {
			name = "reshard_rate 0 (no bound)"
		}
		if note := reshardOnce(ctx, logf, rate, sc.row(name)); note != "" {
			sc.Notes = append(sc.Notes, name+": "+note)
		}
	}
	sc.Notes = append(sc.Notes,
		"moved/s = tasks the change moved (the layout record's count) ÷ its duration, from BeginResize to the last shard done; about half the backlog changes shard going from 16 to 32",
		"reshard_rate is per scheduler replica (scheduler.reshard_rate; the default is 5000), two replicas here",
		"lateness = handler start − due of the load's tasks (in-process worker, concurrency as in the other scenarios), by due time before the change began and while it ran; lost = acknowledged and never run")
	return sc
}

// reshardOnce runs the scenario once with the schedulers' reshard_rate
// rate, into r; it returns why it could not, or "".
func reshardOnce(ctx context.Context, logf func(string, ...any), rate int, r *row) string {
	e, err := newEnv(ctx, logf, nShards)
	if err != nil {
		return "env: " + err.Error()
	}
	e.schedArgs = []string{"-set", fmt.Sprintf("scheduler.reshard_rate=%d", rate)}
	defer e.stop()
	if e.hgRed, err = localrun.StartRedis(e.dir); err != nil {
		return "redis: " + err.Error()
	}
	e.hgAdmin = e.dial(e.hgAdminN)
	if err := e.startSchedulers(ctx); err != nil {
		return "schedulers: " + err.Error()
	}
	rdb := e.dial(nil)
	defer rdb.Close()
	cli, err := client.New(rdb, client.Config{Namespace: namespace, Shards: nShards})
	if err != nil {
		return "client: " + err.Error()
	}
	// The backlog.
	now := time.Now()
	for i := 0; i < reshardBacklog; i += 1000 {
		batch := make([]client.Task, 1000)
		for k := range batch {
			at := now.Add(65*time.Second + time.Duration(rand.IntN(5000))*time.Millisecond)
			if (i+k)%2 == 1 {
				at = now.Add(2*time.Hour + time.Duration(rand.IntN(3600))*time.Second)
			}
			batch[k] = client.Task{ID: "b-" + strconv.Itoa(i+k), Queue: hgQueue, Payload: []byte("backlog"), At: at}
		}
		if _, err := cli.EnqueueBatch(ctx, batch); err != nil {
			return "backlog: " + err.Error()
		}
	}
	logf("reshard: %d tasks stored in %s", reshardBacklog, time.Since(now).Round(time.Millisecond))

	// The load, and a worker in this process recording its lateness.
	var mu sync.Mutex
	late := map[string]float64{} // ms, first start
	due := map[string]time.Time{}
	runs := map[string]int{}
	w, err := worker.New(rdb, workerConfig(nShards, prometheus.NewRegistry()))
	if err == nil {
		err = w.Handle(hgQueue, func(_ context.Context, t *worker.Task) error {
			now := time.Now()
			if strings.HasPrefix(t.ID, "s-") {
				mu.Lock()
				if runs[t.ID]++; runs[t.ID] == 1 {
					late[t.ID] = float64(now.Sub(t.Due).Microseconds()) / 1000
					due[t.ID] = t.Due
				}
				mu.Unlock()
			}
			return nil
		}, queueOptions(concurrency))
	}
	if err != nil {
		return "worker: " + err.Error()
	}
	wctx, stopWorker := context.WithCancel(ctx)
	wdone := make(chan struct{})
	go func() { defer close(wdone); _ = w.Run(wctx) }()
	defer func() { stopWorker(); <-wdone }()

	lctx, stopLoad := context.WithCancel(ctx)
	var sent sync.Map
	ldone := make(chan struct{})
	go func() {
		defer close(ldone)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := 0; lctx.Err() == nil; {
			select {
			case <-lctx.Done():
				return
			case <-tick.C:
			}
			batch := make([]client.Task, reshardRate/20)
			for k := range batch {
				batch[k] = client.Task{ID: "s-" + strconv.Itoa(i), Queue: hgQueue, Payload: []byte("load"), Delay: time.Duration(rand.IntN(2000)) * time.Millisecond}
				i++
			}
			rs, _ := cli.EnqueueBatch(context.Background(), batch)
			for k, res := range rs {
				if res.Err == nil {
					sent.Store(batch[k].ID, true)
				}
			}
		}
	}()
	select { // timed phase: the lateness before the change
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
	}
	store := shard.NewStore(rdb, e.layout)
	if _, err := store.BeginResize(ctx, reshardTo); err != nil {
		stopLoad()
		<-ldone
		return "resize: " + err.Error()
	}
	var rec shard.LayoutRecord
	for ctx.Err() == nil {
		if rec, err = store.ReadLayout(ctx); err == nil && rec.State == shard.LayoutStable {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	select { // timed phase: the load after the change
	case <-ctx.Done():
	case <-time.After(2 * time.Second):
	}
	stopLoad()
	<-ldone
	want := 0
	sent.Range(func(any, any) bool { want++; return true })
	deadline := time.Now().Add(20 * time.Second)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		mu.Lock()
		n := len(late)
		mu.Unlock()
		if n >= want {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}

	mu.Lock()
	defer mu.Unlock()
	var before, during []float64
	dups := 0
	for id, ms := range late {
		switch d := due[id]; {
		case d.Before(rec.Started):
			before = append(before, ms)
		case !d.After(rec.Finished):
			during = append(during, ms)
		}
		dups += runs[id] - 1
	}
	sort.Float64s(before)
	sort.Float64s(during)
	secs := rec.Finished.Sub(rec.Started).Seconds()
	r.M["moved"] = float64(rec.Moved)
	r.M["secs"] = secs
	if secs > 0 {
		r.M["rate"] = float64(rec.Moved) / secs
	}
	r.M["b50"], r.M["b99"] = quant(before, 0.5), quant(before, 0.99)
	r.M["d50"], r.M["d99"] = quant(during, 0.5), quant(during, 0.99)
	r.M["lost"] = float64(want - len(late))
	r.M["dups"] = float64(dups)
	logf("reshard (reshard_rate %d): moved %d tasks in %.2f s (%.0f/s); lateness p50/p99 before %.1f/%.1f ms, during %.1f/%.1f ms; lost %d dups %d",
		rate, rec.Moved, secs, r.M["rate"], r.M["b50"], r.M["b99"], r.M["d50"], r.M["d99"], want-len(late), dups)
	return ""
}
