package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/internal/promread"
	"github.com/hourglass-sched/hourglass/worker"
)

// concurrency is the handler concurrency of every consumer: the in-process
// Hourglass worker and the asynq server.
const concurrency = 200

// btask is one task a scenario enqueues: its index in the scenario's
// recorder, due time and payload size.
type btask struct {
	idx     int
	due     time.Time
	payload int
}

// system is a scheduler under test: Hourglass, or asynq with a config.
type system interface {
	name() string
	// setPrefix names the task ids of the next scenario (Hourglass's
	// only where its tasks are named: hgSystem.named).
	setPrefix(p string)
	// enqueue sends tasks from the calling goroutine: Hourglass in one
	// pipelined batch, asynq one EnqueueContext call after the other. It
	// returns how many were enqueued and the first error.
	enqueue(ctx context.Context, ts []btask) (int, error)
	// enqueueEach sends tasks from the calling goroutine with the
	// system's single-task call, one after the other.
	enqueueEach(ctx context.Context, ts []btask) (int, error)
	// startConsumer runs no-op handlers that record into rec.
	startConsumer(ctx context.Context, rec *recorder) (stop func(), err error)
	snap(ctx context.Context) (rstats, error)
	clear(ctx context.Context) error
	// consumerLateness returns the consumer's own lateness metric
	// (p50, p99 seconds) if it has one.
	consumerLateness() (p50, p99 float64, ok bool)
}

var (
	payloadMu    sync.Mutex
	payloadCache = map[int][]byte{}
)

// payloadOf returns n bytes starting with head. Payloads without a head
// are shared (read-only) so that building them costs the producers
// nothing.
func payloadOf(n int, head string) []byte {
	if head == "" {
		payloadMu.Lock()
		defer payloadMu.Unlock()
		if b, ok := payloadCache[n]; ok {
			return b
		}
		b := make([]byte, n)
		for i := range b {
			b[i] = 'x'
		}
		payloadCache[n] = b
		return b
	}
	b := make([]byte, max(n, len(head)))
	copy(b, head)
	for i := len(head); i < len(b); i++ {
		b[i] = 'x'
	}
	return b
}

// ---- Hourglass ----

type hgSystem struct {
	e       *env
	prefix  string
	prodRdb redis.UniversalClient
	prodN   *cmdCounter
	cli     *client.Client
	workN   *cmdCounter
	// named: tasks carry the ids id() gives (scenarios that look tasks
	// up by id or by shard); else the client generates them, as it does
	// for most callers (shard.Runs), and the payload's head carries the
	// task's index.
	named    bool
	label    string // row name: "hourglass", or with its shard count when not the default, or its cluster
	lastReg  *prometheus.Registry
	lastLate promread.Histogram
}

func newHG(e *env) (*hgSystem, error) {
	h := &hgSystem{e: e, prodN: newCmdCounter(), workN: newCmdCounter(), label: "hourglass"}
	if e.shards != nShards {
		h.label = fmt.Sprintf("hourglass, %d shards", e.shards)
	}
	if len(e.nodes) > 0 {
		h.label = fmt.Sprintf("hourglass, %d-node cluster", len(e.nodes))
	}
	if e.prefetch > 0 {
		h.label = fmt.Sprintf("hourglass, prefetch %s (tuned)", e.prefetch)
	}
	h.prodRdb = e.dial(h.prodN)
	var err error
	h.cli, err = client.New(h.prodRdb, client.Config{Namespace: namespace, Shards: e.shards})
	return h, err
}

func (h *hgSystem) name() string       { return h.label }
func (h *hgSystem) setPrefix(p string) { h.prefix = p }
func (h *hgSystem) id(i int) string    { return h.prefix + "-" + strconv.Itoa(i) }

// task returns the client task of t.
func (h *hgSystem) task(t btask) client.Task {
	if h.named {
		return client.Task{ID: h.id(t.idx), Queue: hgQueue, Payload: payloadOf(t.payload, ""), At: t.due}
	}
	return client.Task{Queue: hgQueue, Payload: payloadOf(t.payload, strconv.Itoa(t.idx)+":"), At: t.due}
}

// index returns the index of the task a handler runs: its payload's head,
// or its id's tail for a named task.
func index(t *worker.Task) int {
	if i := bytes.IndexByte(t.Payload, ':'); i > 0 {
		n, err := strconv.Atoi(string(t.Payload[:i]))
		if err == nil {
			return n
		}
	}
	n, _ := strconv.Atoi(t.ID[strings.LastIndexByte(t.ID, '-')+1:])
	return n
}

func (h *hgSystem) enqueue(ctx context.Context, ts []btask) (int, error) {
	batch := make([]client.Task, len(ts))
	for i, t := range ts {
		batch[i] = h.task(t)
	}
	res, err := h.cli.EnqueueBatch(ctx, batch)
	ok := 0
	for _, r := range res {
		if r.Err == nil {
			ok++
		}
	}
	return ok, err
}

func (h *hgSystem) enqueueEach(ctx context.Context, ts []btask) (int, error) {
	for i, t := range ts {
		if _, err := h.cli.Enqueue(ctx, h.task(t)); err != nil {
			return i, err
		}
	}
	return len(ts), nil
}

// warmUp loads the enqueue script into Redis's script cache. On a cold
// cache, concurrent pipelined batches hit NOSCRIPT and the client re-runs
// the whole batch, so tasks that did go in are reported as duplicates.
func (h *hgSystem) warmUp(ctx context.Context) error {
	h.setPrefix(uniq("warmup"))
	if _, err := h.enqueue(ctx, []btask{{idx: 0, due: time.Now().Add(time.Hour), payload: 1}}); err != nil {
		return err
	}
	return h.clear(ctx)
}

func (h *hgSystem) startConsumer(ctx context.Context, rec *recorder) (func(), error) {
	reg := prometheus.NewRegistry()
	stop, err := h.runWorker(ctx, reg, func(_ context.Context, t *worker.Task) error {
		rec.record(index(t), t.Due.UnixNano())
		return nil
	})
	if err == nil {
		h.lastReg = reg
	}
	return stop, err
}

// runWorker runs a worker in this process on the benchmark queue with
// handler h, its metrics in reg, until the returned stop is called
// (which waits for it and closes its client).
func (h *hgSystem) runWorker(ctx context.Context, reg prometheus.Registerer, handler worker.Handler) (stop func(), err error) {
	return h.runWorkerOn(ctx, hgQueue, concurrency, reg, handler)
}

// runWorkerOn is runWorker on queue with conc handlers.
func (h *hgSystem) runWorkerOn(ctx context.Context, queue string, conc int, reg prometheus.Registerer, handler worker.Handler) (stop func(), err error) {
	rdb := h.e.dial(h.workN)
	w, err := worker.New(rdb, workerConfig(h.e.shards, reg))
	if err == nil {
		err = w.Handle(queue, handler, queueOptions(conc))
	}
	if err != nil {
		rdb.Close()
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(wctx)
	}()
	return func() {
		cancel()
		<-done
		rdb.Close()
	}, nil
}

// acks returns the current worker's acknowledged count.
func (h *hgSystem) acks() float64 {
	if h.lastReg == nil {
		return 0
	}
	fams, err := h.lastReg.Gather()
	if err != nil {
		return 0
	}
	n, _ := promread.Counter(famMap(fams), "hourglass_worker_acks_total") // exported from Handle on
	return n
}

func (h *hgSystem) consumerLateness() (float64, float64, bool) {
	if h.lastReg == nil {
		return 0, 0, false
	}
	fams, err := h.lastReg.Gather()
	if err != nil {
		return 0, 0, false
	}
	var hist promread.Histogram
	if err := hist.Add(famMap(fams), "hourglass_worker_lateness_seconds"); err != nil {
		return 0, 0, false
	}
	return hist.Quantile(0.5), hist.Quantile(0.99), hist.Count > 0
}

// moveLateness merges the schedulers' move-lateness histograms.
func (h *hgSystem) moveLateness(ctx context.Context) (promread.Histogram, error) {
	var urls []string
	for _, s := range h.e.scheds {
		if s.Running() {
			urls = append(urls, "http://"+s.http+"/metrics")
		}
	}
	return promread.Scrape(ctx, "hourglass_move_lateness_seconds", urls...)
}

func (h *hgSystem) snap(ctx context.Context) (rstats, error) {
	var pids []int
	for _, s := range h.e.scheds {
		if s.Running() {
			pids = append(pids, s.Pid())
		}
	}
	if len(h.e.nodes) > 0 {
		return h.e.clusterSnapshot(ctx, counters{h.prodN, h.workN}, pids)
	}
	return snapshot(ctx, h.e.hgAdmin, h.e.hgAdminN, counters{h.prodN, h.workN}, pids)
}

func (h *hgSystem) clear(ctx context.Context) error { return h.e.clearHG(ctx) }

func (h *hgSystem) close() { h.prodRdb.Close() }

// enqueueAll sends ts in chunks of chunk through send from g goroutines until done or
// the deadline; it returns how many were enqueued and the first error (a
// failed task does not stop the others).
func enqueueAll(ctx context.Context, send func(context.Context, []btask) (int, error), ts []btask, g, chunk int, deadline time.Time) (int, error) {
	var mu sync.Mutex
	next, sent := 0, 0
	var firstErr error
	var wg sync.WaitGroup
	for range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if next >= len(ts) || (!deadline.IsZero() && time.Now().After(deadline)) || ctx.Err() != nil {
					mu.Unlock()
					return
				}
				lo, hi := next, min(next+chunk, len(ts))
				next = hi
				mu.Unlock()
				ok, err := send(ctx, ts[lo:hi])
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				sent += ok
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	return sent, firstErr
}

var errIncomplete = errors.New("incomplete")

func famMap(fams []*dto.MetricFamily) map[string]*dto.MetricFamily {
	m := make(map[string]*dto.MetricFamily, len(fams))
	for _, f := range fams {
		m[f.GetName()] = f
	}
	return m
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return fmt.Sprint(err)
}

// workerConfig is the Hourglass worker of a run: cmd/worker's defaults
// (worker.DefaultConfig: the ack linger among them), a 5 s shutdown
// grace.
func workerConfig(shards int, reg prometheus.Registerer) worker.Config {
	c := worker.DefaultConfig()
	c.Namespace, c.Shards, c.Registerer, c.ShutdownGrace = namespace, shards, reg, 5*time.Second
	return c
}

// queueOptions consumes a queue with cmd/worker's defaults
// (worker.DefaultQueueOptions: handlers run before their lease) and
// concurrency handlers.
func queueOptions(concurrency int) worker.QueueOptions {
	o := worker.DefaultQueueOptions()
	o.Concurrency = concurrency
	return o
}
