// Command worker runs Hourglass tasks: it consumes every configured queue
// that has a target, delivering each task either to an HTTP endpoint
// (queues.<name>.http.url) or to a program (queues.<name>.command). See
// internal/executor for what a target receives and how its answer decides
// between done, retry and dead letter.
//
// Usage:
//
//	worker [-config file.yaml] [-set key=value ...]
//
// Configuration comes from built-in defaults, the YAML file, HOURGLASS_*
// environment variables and -set flags, in rising precedence; see
// configs/worker.example.yaml. The worker uses redis, namespace, shards
// (both equal to the schedulers'), worker, queues, http and log. Queues
// without a target are not consumed. An invalid value (a TLS file that is
// missing or not PEM included), or no queue with a
// target, exits with status 2 and a message naming the key.
//
// http.addr (default 127.0.0.1:9465; empty disables it) serves GET
// /metrics, /healthz (200 while the process runs) and /readyz (200 while
// the Redis nodes holding the shards answer PING within 1s: on a Redis
// Cluster each primary serving a shard; else 503 naming the node).
//
// SIGTERM or SIGINT stops fetching; running tasks may finish for
// worker.shutdown_grace, the rest are released to their ready lists at
// once. Then the process exits 0.
//
// A consumed queue that no scheduler has registered in the namespace
// once worker.registration_wait (default 1m) has passed since the start
// stops the worker the same way, and it exits 1 with an error naming the
// namespace, the queues missing and the queues registered: a wrong
// namespace or queue name fails instead of consuming nothing. The wait
// lets a scheduler started at the same time (a rolling deploy) register
// them first.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hourglass-sched/hourglass/internal/config"
	"github.com/hourglass-sched/hourglass/internal/connect"
	"github.com/hourglass-sched/hourglass/internal/executor"
	"github.com/hourglass-sched/hourglass/internal/procs"
	"github.com/hourglass-sched/hourglass/internal/tracing"
	"github.com/hourglass-sched/hourglass/internal/version"
	"github.com/hourglass-sched/hourglass/worker"
)

// errNoTarget is reported when no queue can be consumed.
var errNoTarget = &config.FieldError{Key: "queues", Msg: "no queue has an http.url or command; nothing to consume"}

func main() {
	os.Exit(run(os.Args[1:]))
}

// run is the whole program. Shutdown order: the signal cancels ctx; Run
// stops fetching, lets handlers finish for the grace period and releases
// what is left; then the HTTP server stops (so /metrics and /healthz
// answer during the drain); then the Redis client closes.
func run(args []string) int {
	cfg, err := config.Load(args, os.Environ(), config.WithDefaults(config.WorkerDefaults))
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, config.Usage())
		return 0
	}
	if errors.Is(err, config.ErrVersion) {
		fmt.Println(version.String())
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "worker: %v\n", err)
		return 2
	}
	if !slices.ContainsFunc(slices.Collect(maps.Values(cfg.Queues)), hasTarget) {
		fmt.Fprintf(os.Stderr, "worker: %v\n", errNoTarget)
		return 2
	}
	log := connect.Logger(cfg.Log, "worker", os.Stderr)
	log.Debug("effective configuration", "config", fmt.Sprintf("%+v", cfg.Redacted()))

	wc := cfg.ForWorker()
	wc.ProcessID = procs.DefaultID()
	// Every connection carries the worker's name: the process registry
	// tells it is alive by them (hourglass ps).
	rdb, err := connect.RedisAs(cfg.Redis, worker.ConnName(wc.Namespace, wc.ProcessID))
	if err != nil {
		log.Error("start failed", "error", err)
		return 1
	}
	defer rdb.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	wc.Logger, wc.Registerer = log, reg
	t := cfg.Worker.Tracing
	tp, flush, err := tracing.New(context.Background(), tracing.Config{Exporter: t.Exporter, Endpoint: t.Endpoint, File: t.File}, "hourglass-worker", version.Short())
	switch {
	case errors.Is(err, tracing.ErrOff):
	case err != nil:
		log.Error("start failed", "error", err)
		return 1
	default:
		wc.TracerProvider = tp
		defer flushSpans(flush, log)
		log.Info("tracing on", "exporter", t.Exporter)
	}
	w, err := worker.New(rdb, wc)
	if err != nil {
		log.Error("start failed", "error", err)
		return 1
	}
	if err := handleQueues(w, cfg, log); err != nil {
		log.Error("start failed", "error", err)
		return 1
	}

	var srv *http.Server
	if cfg.HTTP.Addr != "" {
		// Bind now so that an address in use is reported at start.
		l, err := net.Listen("tcp", cfg.HTTP.Addr)
		if err != nil {
			log.Error("start failed", "error", fmt.Errorf("listen on http.addr %s: %w", cfg.HTTP.Addr, err))
			return 1
		}
		srv = &http.Server{Handler: handler(reg, w.Ready), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("http server failed", "error", err)
			}
		}()
		log.Info("serving http", "addr", l.Addr().String())
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	code := 0
	if err := w.Run(ctx); err != nil {
		log.Error("worker failed", "error", err)
		code = 1
	}
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			log.Warn("http server shutdown", "error", err)
		}
	}
	return code
}

// flushSpans exports the spans not exported yet, for at most 5 s.
func flushSpans(flush func(context.Context) error, log hclog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := flush(ctx); err != nil {
		log.Warn("tracing: spans not exported", "error", err)
	}
}

func hasTarget(q config.QueueConfig) bool { return q.HTTP.URL != "" || len(q.Command) > 0 }

// handleQueues registers a handler for every queue with a target.
func handleQueues(w *worker.Worker, cfg *config.Config, log hclog.Logger) error {
	client := httpClient(cfg)
	for _, name := range slices.Sorted(maps.Keys(cfg.Queues)) {
		q := cfg.Queues[name]
		var h worker.Handler
		switch {
		case q.HTTP.URL != "":
			h = executor.HTTP(q.HTTP, client)
			log.Info("consuming queue", "queue", name, "target", "http", "method", q.HTTP.Method, "concurrency", q.Concurrency)
		case len(q.Command) > 0:
			if err := executor.CheckCommand(q.Command); err != nil {
				return fmt.Errorf("queue %s: %w", name, err)
			}
			h = executor.Command(q.Command)
			log.Info("consuming queue", "queue", name, "target", "command", "program", q.Command[0], "concurrency", q.Concurrency)
		default:
			log.Info("queue has no http.url or command; not consumed", "queue", name)
			continue
		}
		if err := w.Handle(name, h, q.ForWorker()); err != nil {
			return fmt.Errorf("queue %s: %w", name, err)
		}
	}
	return nil
}

// httpClient returns the client shared by the HTTP targets. It has no
// timeout of its own (each request ends with its handler's ctx) and keeps
// enough idle connections per host for the largest queue's concurrency.
func httpClient(cfg *config.Config) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	for _, q := range cfg.Queues {
		if q.HTTP.URL != "" {
			tr.MaxIdleConnsPerHost = max(tr.MaxIdleConnsPerHost, q.Concurrency)
		}
	}
	tr.MaxIdleConns = max(tr.MaxIdleConns, tr.MaxIdleConnsPerHost)
	return &http.Client{Transport: tr}
}

// handler serves the worker's metrics and health endpoints.
// ready is readyz's check: worker.Worker.Ready, which pings the Redis
// nodes holding the shards the worker pops.
func handler(reg *prometheus.Registry, ready func(context.Context) error) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		if err := ready(ctx); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	return mux
}
