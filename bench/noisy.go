package main

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/internal/promread"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/worker"
)

// ---- Noisy neighbour: fair turns between keys (#28) ----

// The noisy scenario's queues, registered by the bench itself (as the
// results scenario's): one fair, one in due order.
const (
	fairQueue = "noisy-fair"
	fifoQueue = "noisy-fifo"
	noisyConc = 64
)

// runNoisy enqueues, into each of a fair queue and a plain one, big
// tasks of one key and one task of each of quiet other keys, all due at
// one instant (the big key's ids sort first), and runs them with a
// worker of concurrency 64 and no-op handlers. It reports the quiet
// keys' handler-start lateness (start − due) and when the last task of
// the big key started: with fair turns the quiet keys start within the
// first turns; in due order, behind the backlog.
func runNoisy(ctx context.Context, hg *hgSystem, big, quiet int, logf func(string, ...any)) *scenario {
	sc := &scenario{Name: "noisy", Title: fmt.Sprintf("Noisy neighbour: one key with %d tasks and %d keys with one task each, all due at one instant, worker concurrency %d", big, quiet, noisyConc),
		Cols: []col{{"q50", "quiet keys' lateness p50 ms", "%.1f"}, {"q99", "p99 ms", "%.1f"}, {"qmax", "max ms", "%.1f"},
			{"drain", "backlog's last start s", "%.2f"}, {"rate", "tasks/s", "%.0f"}, {"rcpu", "redis CPU µs/task", "%.1f"}}}
	sc.Notes = append(sc.Notes, "lateness = handler start − due (one host's clock); keys are the ids' hash tags (client.Task.Key); the big key's ids sort before the quiet keys', so in due order they go first; "+
		fmt.Sprintf("fair: queues.<q>.fair with the default fair_window (%d per shard); FIFO: a plain queue; the same binary and Redis", shard.DefaultFairWindow))
	if err := registerFairQueues(ctx, hg); err != nil {
		sc.Notes = append(sc.Notes, fmt.Sprintf("register: %v", err))
		return sc
	}
	for _, m := range []struct{ name, queue string }{{"hourglass, fair", fairQueue}, {"hourglass, FIFO", fifoQueue}} {
		r := sc.row(m.name)
		if err := noisyRun(ctx, hg, r, m.queue, big, quiet); err != nil {
			r.note("%v", err)
		}
		logf("noisy %s: quiet keys' lateness p50 %.1f ms p99 %.1f ms; backlog's last start %.2f s", m.name, r.M["q50"], r.M["q99"], r.M["drain"])
	}
	return sc
}

// registerFairQueues registers the fair and the plain queue of the noisy
// and keys scenarios (the schedulers leave queues they do not configure
// alone).
func registerFairQueues(ctx context.Context, hg *hgSystem) error {
	rdb := hg.e.dial(hg.workN)
	defer rdb.Close()
	p := shard.QueuePolicy{MaxRetries: 3, Timeout: 30 * time.Second, MaxPayload: shard.DefaultMaxPayload}
	fair := p
	fair.FairWindow = shard.DefaultFairWindow
	return shard.NewStore(rdb, hg.e.layout).RegisterQueues(ctx, map[string]shard.QueuePolicy{fairQueue: fair, fifoQueue: p})
}

// noisyRun runs one row of runNoisy on queue.
func noisyRun(ctx context.Context, hg *hgSystem, r *row, queue string, big, quiet int) error {
	var mu sync.Mutex
	var quietLate []float64
	var lastBig, handled atomic.Int64
	stop, err := hg.runWorkerOn(ctx, queue, noisyConc, prometheus.NewRegistry(), func(_ context.Context, t *worker.Task) error {
		now := time.Now()
		if shard.KeyOf(t.ID) == "big" {
			for v := lastBig.Load(); now.UnixNano() > v && !lastBig.CompareAndSwap(v, now.UnixNano()); v = lastBig.Load() {
			}
		} else {
			mu.Lock()
			quietLate = append(quietLate, float64(now.Sub(t.Due).Microseconds())/1000)
			mu.Unlock()
		}
		handled.Add(1)
		return nil
	})
	if err != nil {
		return err
	}
	defer stop()

	// Due a whole second after the enqueues can be done (about 100,000/s).
	due := time.Now().Add(time.Duration(big+quiet)*10*time.Microsecond + 2*time.Second).Truncate(time.Second).Add(time.Second)
	tasks := make([]client.Task, 0, big+quiet)
	for range big {
		tasks = append(tasks, client.Task{Queue: queue, Key: "big", At: due, Payload: payloadOf(16, "")})
	}
	for i := range quiet {
		tasks = append(tasks, client.Task{Queue: queue, Key: fmt.Sprintf("quiet-%d", i), At: due, Payload: payloadOf(16, "")})
	}
	if err := enqueueChunks(ctx, hg.cli, tasks, 8, 1000); err != nil {
		return err
	}
	if late := time.Since(due); late > 0 {
		r.note("enqueue ended %s after the due time", late.Round(time.Millisecond))
	}
	a, _ := hg.snap(ctx)
	if !waitUntil(ctx, 5*time.Minute, func() bool { return handled.Load() >= int64(big+quiet) }) {
		return fmt.Errorf("only %d of %d handled", handled.Load(), big+quiet)
	}
	b, _ := hg.snap(ctx)
	w2 := diff(a, b)
	mu.Lock()
	defer mu.Unlock()
	sort.Float64s(quietLate)
	r.set("q50", quant(quietLate, 0.5))
	r.set("q99", quant(quietLate, 0.99))
	if len(quietLate) > 0 {
		r.set("qmax", quietLate[len(quietLate)-1])
	}
	end := time.Unix(0, lastBig.Load())
	r.set("drain", end.Sub(due).Seconds())
	r.set("rate", float64(big+quiet)/end.Sub(due).Seconds())
	r.set("rcpu", 1e6*w2.cpu/float64(big+quiet))
	return nil
}

// enqueueChunks enqueues tasks in batches of chunk from senders
// goroutines, in order of the batches' starts.
func enqueueChunks(ctx context.Context, cli *client.Client, tasks []client.Task, senders, chunk int) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var first atomic.Value
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(int64(chunk))) - chunk
				if i >= len(tasks) || ctx.Err() != nil {
					return
				}
				if _, err := cli.EnqueueBatch(ctx, tasks[i:min(i+chunk, len(tasks))]); err != nil {
					first.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := first.Load().(error); err != nil {
		return err
	}
	return nil
}

// ---- Scale of keys (#28) ----

// runKeys enqueues n tasks due at one instant into a plain queue without
// keys (today's cost) and into a fair queue with n distinct keys, and
// reports for each: Redis memory per task while every task waits
// (moved, no worker yet), and once a worker of concurrency 200 ran them
// all: the drain from the due time, Redis CPU and commands per task over
// the whole run (enqueue, move, delivery). The fair row's memory beyond
// the plain one's is what a key costs while it has a task waiting.
func runKeys(ctx context.Context, hg *hgSystem, n int, logf func(string, ...any)) *scenario {
	sc := &scenario{Name: "keys", Title: fmt.Sprintf("Scale of keys: %d tasks due at one instant, no keys in a plain queue against %d distinct keys in a fair queue", n, n),
		Cols: []col{{"mem", "Redis bytes/task waiting", "%.0f"}, {"drain", "drain/s", "%.0f"}, {"rcpu", "Redis CPU µs/task", "%.1f"}, {"cmds", "Redis cmds/task", "%.1f"}}}
	sc.Notes = append(sc.Notes, "memory = used_memory after the movers moved every task and before a worker runs, minus before the enqueue; drain = tasks / (last handler start − due); CPU and commands from the enqueue to the last ack")
	if err := registerFairQueues(ctx, hg); err != nil {
		sc.Notes = append(sc.Notes, fmt.Sprintf("register: %v", err))
		return sc
	}
	var perTask [2]float64
	for i, m := range []struct {
		name, queue string
		keyed       bool
	}{{"hourglass, plain queue, no keys", fifoQueue, false}, {"hourglass, fair queue, distinct keys", fairQueue, true}} {
		r := sc.row(m.name)
		if err := keysRun(ctx, hg, r, m.queue, n, m.keyed); err != nil {
			r.note("%v", err)
		}
		perTask[i] = r.M["rcpu"]
		logf("keys %s: %.0f bytes/task waiting, drain %.0f/s, Redis %.1f µs/task", m.name, r.M["mem"], r.M["drain"], r.M["rcpu"])
	}
	if perTask[0] > 0 {
		sc.Notes = append(sc.Notes, fmt.Sprintf("Redis CPU per task with keys against without: %+.0f%%", 100*(perTask[1]/perTask[0]-1)))
	}
	return sc
}

// keysRun runs one row of runKeys.
func keysRun(ctx context.Context, hg *hgSystem, r *row, queue string, n int, keyed bool) error {
	due := time.Now().Add(time.Duration(n)*10*time.Microsecond + 2*time.Second).Truncate(time.Second).Add(time.Second)
	tasks := make([]client.Task, n)
	for i := range tasks {
		tasks[i] = client.Task{Queue: queue, At: due, Payload: payloadOf(16, "")}
		if keyed {
			tasks[i].Key = fmt.Sprintf("k%d", i)
		}
	}
	a, err := hg.snap(ctx)
	if err != nil {
		return err
	}
	if err := enqueueChunks(ctx, hg.cli, tasks, 8, 1000); err != nil {
		return err
	}
	// Every task moved: the delayed sets hold none of them.
	if !waitUntil(ctx, time.Minute, func() bool {
		if time.Now().Before(due) {
			return false
		}
		var left int64
		for sh := range hg.e.shards {
			left += hg.e.hgAdmin.ZCard(ctx, hg.e.layout.Delayed(sh)).Val()
		}
		return left == 0
	}) {
		return fmt.Errorf("tasks left in the delayed sets a minute after the due time")
	}
	moved, err := hg.snap(ctx)
	if err != nil {
		return err
	}
	r.set("mem", float64(moved.mem-a.mem)/float64(n))
	var handled atomic.Int64
	var last atomic.Int64
	reg := prometheus.NewRegistry()
	stop, err := hg.runWorkerOn(ctx, queue, concurrency, reg, func(_ context.Context, _ *worker.Task) error {
		last.Store(time.Now().UnixNano())
		handled.Add(1)
		return nil
	})
	if err != nil {
		return err
	}
	defer stop()
	if !waitUntil(ctx, 5*time.Minute, func() bool { return handled.Load() >= int64(n) }) {
		return fmt.Errorf("only %d of %d handled", handled.Load(), n)
	}
	// The last acks land (the window below counts their Redis work).
	if !waitUntil(ctx, time.Minute, func() bool {
		fams, err := reg.Gather()
		acks, _ := promread.Counter(famMap(fams), "hourglass_worker_acks_total")
		return err == nil && acks >= float64(n)
	}) {
		return fmt.Errorf("not every task acknowledged within a minute of its start")
	}
	b, err := hg.snap(ctx)
	if err != nil {
		return err
	}
	win := diff(a, b)
	r.set("drain", float64(n)/time.Unix(0, last.Load()).Sub(due).Seconds())
	r.set("rcpu", 1e6*win.cpu/float64(n))
	r.set("cmds", float64(win.total)/float64(n))
	return nil
}
