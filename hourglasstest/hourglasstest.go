// Package hourglasstest runs a real Hourglass for a Go test or example: a
// redis-server and an etcd started on free loopback ports with their data
// in a temporary directory (or the servers the caller names), and a
// scheduler replica running in-process (package scheduler). Producers,
// workers and inspectors the test builds on it talk to real servers, as
// in production; nothing is mocked.
//
//	func TestSignup(t *testing.T) {
//		env := hourglasstest.Start(t, hourglasstest.Options{})
//		c, err := env.NewClient()
//		...
//		w, err := worker.New(env.Redis(), env.WorkerConfig())
//		...
//		env.RunWorker(w)
//	}
//
// Starting needs the redis-server and etcd binaries on PATH (Debian's
// redis-server and etcd-server packages; Hourglass's scripts/install-deps.sh
// installs them), unless Options or the environment name servers to attach
// to: HOURGLASS_TEST_REDIS_ADDR (host:port) and HOURGLASS_TEST_ETCD_ENDPOINTS
// (comma-separated URLs). Each Env uses a namespace of its own, so Envs
// may share attached servers; an Env leaves its namespace's keys in an
// attached Redis. Hourglass's runnable examples (client, worker, inspect,
// periodic, scheduler) and examples/tour run on this package.
package hourglasstest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/internal/config"
	"github.com/hourglass-sched/hourglass/internal/errtext"
	"github.com/hourglass-sched/hourglass/internal/localrun"
	"github.com/hourglass-sched/hourglass/scheduler"
	"github.com/hourglass-sched/hourglass/worker"
)

// Environment variables naming servers to attach to instead of starting
// them.
const (
	RedisAddrEnv     = "HOURGLASS_TEST_REDIS_ADDR"
	EtcdEndpointsEnv = "HOURGLASS_TEST_ETCD_ENDPOINTS"
)

// StartTimeout bounds New when its ctx has no deadline: servers started,
// queues registered and every shard owned.
const StartTimeout = 30 * time.Second

// Options configure an Env. The zero value starts both servers and a
// scheduler with scheduler.DefaultSettings (16 shards, one queue named
// "default"), its HTTP endpoint off.
type Options struct {
	// RedisAddr attaches to this Redis (host:port) instead of starting
	// one; empty means $HOURGLASS_TEST_REDIS_ADDR, else start one.
	RedisAddr string
	// EtcdEndpoints attaches to this etcd instead of starting one; nil
	// means $HOURGLASS_TEST_ETCD_ENDPOINTS, else start one.
	EtcdEndpoints []string
	// Namespace is the deployment's namespace; empty means a new one,
	// "hgtest-" and random hex.
	Namespace string
	// Configure changes the scheduler's configuration before it starts
	// (queues, shard count, periodic schedules, HTTP address, logger);
	// Redis, etcd and the namespace are set already.
	Configure func(*scheduler.Config)
	// NoScheduler starts the servers only.
	NoScheduler bool
	// Slog receives the scheduler's logs and those of the workers built
	// from WorkerConfig. Nil means: with Start, every record to t.Log
	// (shown for a failed test or with go test -v); with New, warnings
	// and errors to standard error.
	Slog *slog.Logger
}

// Env is a running Hourglass. Close stops what New started.
type Env struct {
	cfg   scheduler.Config
	rdb   *redis.Client
	sched *scheduler.Scheduler
	redis *localrun.Redis
	etcd  *localrun.Etcd
	dir   string
	// cancel stops the scheduler, after the workers (workers, wwg).
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	workers []context.CancelFunc
	wwg     sync.WaitGroup
	mu      sync.Mutex
	closing bool    // set by Close: RunWorker refuses
	errs    []error // what the scheduler's and the workers' Run returned
	closed  sync.Once
}

// Start is New for a test: it fails t if the Env does not start and
// closes it when t ends, failing t if the scheduler or a worker run by
// RunWorker failed.
func Start(t testing.TB, opts Options) *Env {
	t.Helper()
	var tw *testWriter
	if opts.Slog == nil {
		tw = &testWriter{t: t}
		opts.Slog = slog.New(slog.NewTextHandler(tw, nil))
	}
	e, err := New(context.Background(), opts)
	if err != nil {
		tw.stop()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("closing the test environment: %v", err)
		}
		tw.stop()
	})
	return e
}

// testWriter writes log lines to t.Log until stop: a goroutine the
// test did not stop must not log through t after the test ended.
type testWriter struct {
	t    testing.TB
	mu   sync.Mutex
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

// stop ends the writing to t; nil w does nothing.
func (w *testWriter) stop() {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}

// New starts an Env and returns once the scheduler has registered its
// queues and owns every shard, so that a task enqueued next is moved
// when due. Without a deadline in ctx it waits StartTimeout at most.
func New(ctx context.Context, opts Options) (env *Env, err error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, StartTimeout)
		defer cancel()
	}
	e := &Env{cfg: scheduler.DefaultConfig()}
	e.cfg.Slog = opts.Slog
	if e.cfg.Slog == nil {
		e.cfg.Slog = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	defer func() {
		if err != nil {
			err = errors.Join(errtext.Errorf("test environment: %w", err), e.Close())
			env = nil
		}
	}()
	if err := e.startServers(opts); err != nil {
		return e, err // the deferred Close stops what started
	}
	e.cfg.Namespace = opts.Namespace
	if e.cfg.Namespace == "" {
		e.cfg.Namespace = "hgtest-" + randomHex(4)
	}
	if opts.Configure != nil {
		opts.Configure(&e.cfg)
	}
	e.rdb = redis.NewClient(&redis.Options{Addr: e.cfg.Redis.Addr, Username: e.cfg.Redis.Username, Password: e.cfg.Redis.Password})
	if opts.NoScheduler {
		return e, nil
	}
	return e, e.startScheduler(ctx)
}

// startServers starts (or attaches to) Redis and etcd.
func (e *Env) startServers(opts Options) error {
	addr, endpoints := opts.RedisAddr, opts.EtcdEndpoints
	if addr == "" {
		addr = os.Getenv(RedisAddrEnv)
	}
	if endpoints == nil && os.Getenv(EtcdEndpointsEnv) != "" {
		endpoints = strings.Split(os.Getenv(EtcdEndpointsEnv), ",")
	}
	if addr == "" || endpoints == nil {
		dir, err := os.MkdirTemp("", "hourglasstest-")
		if err != nil {
			return err
		}
		e.dir = dir
	}
	if addr == "" {
		r, err := localrun.StartRedis(e.dir)
		if err != nil {
			return fmt.Errorf("start redis-server (install it, or set %s): %w", RedisAddrEnv, err)
		}
		e.redis, addr = r, r.Addr
	}
	if endpoints == nil {
		et, err := localrun.StartEtcd(e.dir)
		if err != nil {
			return fmt.Errorf("start etcd (install it, or set %s): %w", EtcdEndpointsEnv, err)
		}
		e.etcd, endpoints = et, []string{et.Endpoint}
	}
	e.cfg.Redis.Addr = addr
	e.cfg.Etcd.Endpoints = endpoints
	return nil
}

// startScheduler runs the replica and waits until it is ready.
func (e *Env) startScheduler(ctx context.Context) error {
	s, err := scheduler.New(e.cfg)
	if err != nil {
		return err
	}
	e.sched = s
	runCtx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		if err := s.Run(runCtx); err != nil {
			e.fail(errtext.Errorf("the scheduler failed: %w", err))
		}
	}()
	if err := s.Ready(ctx); err != nil {
		return err
	}
	// One replica: it takes every shard. Owned reports them as the
	// election grants them, within its first campaign.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for len(s.Owned()) < e.cfg.Shards {
		select {
		case <-ctx.Done():
			return fmt.Errorf("the scheduler owns %d of %d shards: %w", len(s.Owned()), e.cfg.Shards, context.Cause(ctx))
		case <-tick.C:
		}
	}
	return nil
}

// fail records an error Close returns.
func (e *Env) fail(err error) {
	e.mu.Lock()
	e.errs = append(e.errs, err)
	e.mu.Unlock()
}

// RunWorker runs w until Close, which stops it (its in-flight tasks get
// the worker's ShutdownGrace) and returns its error, if any. It panics
// after Close.
func (e *Env) RunWorker(w *worker.Worker) {
	ctx, cancel := context.WithCancel(context.Background())
	e.mu.Lock()
	if e.closing {
		e.mu.Unlock()
		cancel()
		panic("hourglasstest: RunWorker after Close")
	}
	e.workers = append(e.workers, cancel)
	e.wwg.Add(1)
	e.mu.Unlock()
	go func() {
		defer e.wwg.Done()
		if err := w.Run(ctx); err != nil {
			e.fail(errtext.Errorf("a worker failed: %w", err))
		}
	}()
}

// Redis returns a client on the Env's Redis, closed by Close.
func (e *Env) Redis() *redis.Client { return e.rdb }

// RedisAddr returns the Redis server's host:port.
func (e *Env) RedisAddr() string { return e.cfg.Redis.Addr }

// EtcdEndpoints returns the etcd endpoints.
func (e *Env) EtcdEndpoints() []string { return e.cfg.Etcd.Endpoints }

// Namespace returns the deployment's namespace.
func (e *Env) Namespace() string { return e.cfg.Namespace }

// Config returns a copy of the scheduler's configuration.
func (e *Env) Config() scheduler.Config {
	c := e.cfg
	c.Settings = scheduler.Settings(config.Config(c.Settings).Clone())
	return c
}

// Scheduler returns the in-process replica (nil with NoScheduler).
func (e *Env) Scheduler() *scheduler.Scheduler { return e.sched }

// NewClient returns a producer for the Env's deployment.
func (e *Env) NewClient() (*client.Client, error) {
	return client.New(e.rdb, client.Config{Namespace: e.cfg.Namespace, Shards: e.cfg.Shards})
}

// WorkerConfig returns worker.DefaultConfig for the Env's deployment,
// logging where the scheduler does.
func (e *Env) WorkerConfig() worker.Config {
	c := worker.DefaultConfig()
	c.Namespace, c.Shards, c.Slog = e.cfg.Namespace, e.cfg.Shards, e.cfg.Slog
	return c
}

// Close stops the workers run by RunWorker, then the scheduler, waits
// for them, stops the servers it started and removes their data. It returns
// what the scheduler's and workers' Run returned. It is safe to call
// more than once.
func (e *Env) Close() error {
	var err error
	e.closed.Do(func() {
		e.mu.Lock()
		e.closing = true
		workers := e.workers
		e.mu.Unlock()
		for _, cancel := range workers {
			cancel()
		}
		e.wwg.Wait()
		if e.cancel != nil {
			e.cancel()
		}
		e.wg.Wait()
		errs := e.errs
		if e.sched != nil {
			errs = append(errs, e.sched.Close())
		}
		if e.rdb != nil {
			errs = append(errs, e.rdb.Close())
		}
		if e.redis != nil {
			e.redis.Stop(5 * time.Second)
		}
		if e.etcd != nil {
			e.etcd.Stop(5 * time.Second)
		}
		if e.dir != "" {
			errs = append(errs, os.RemoveAll(e.dir))
		}
		err = errors.Join(errs...)
	})
	return err
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
