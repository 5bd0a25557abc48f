// Package scheduler assembles a scheduler replica: it joins the etcd
// election for shards, runs the owner's loops (internal/owner: the mover,
// the recovery loop and the periodic schedules' firing) for every shard it owns, registers the
// configured queues in Redis and serves /metrics, /healthz, /readyz,
// /v1/status and the web dashboard (/ui/, internal/dashboard).
//
// Shutdown order (Run's ctx cancelled): the election cancels every
// shard's loops and waits for them (each unsubscribes its shard's
// wake-ups; if their Redis calls have not returned within
// shutdownCallGrace, as with a paused Redis, the Redis connections are
// closed under them), then revokes the replica's lease so other replicas
// take the shards at once; then the waker closes what pub/sub connections remain;
// then the HTTP server; Close releases the Redis and etcd clients.
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/inspect/etcdowners"
	"github.com/hourglass-sched/hourglass/internal/config"
	"github.com/hourglass-sched/hourglass/internal/connect"
	"github.com/hourglass-sched/hourglass/internal/depth"
	"github.com/hourglass-sched/hourglass/internal/election"
	"github.com/hourglass-sched/hourglass/internal/fire"
	"github.com/hourglass-sched/hourglass/internal/history"
	"github.com/hourglass-sched/hourglass/internal/owner"
	"github.com/hourglass-sched/hourglass/internal/procs"
	"github.com/hourglass-sched/hourglass/internal/recovery"
	"github.com/hourglass-sched/hourglass/internal/reshard"
	"github.com/hourglass-sched/hourglass/internal/scan"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/version"
	"github.com/hourglass-sched/hourglass/periodic"
)

// Scheduler is one scheduler replica.
type Scheduler struct {
	cfg       *config.Config
	log       hclog.Logger
	rdb       redis.UniversalClient
	etcd      *clientv3.Client
	store     *shard.Store
	reg       *prometheus.Registry
	waker     *scan.Waker
	mover     *scan.Mover
	recovery  *recovery.Recoverer
	resharder *reshard.Resharder
	loops     []owner.Loop
	election  *election.Manager
	// firer fires the periodic schedules: the configured ones
	// (schedules) and those registered at run time (watchSchedules).
	firer     *fire.Firer
	schedules []*periodic.Compiled
	// hist is the queue history's recorder: periodic tasks fired, and the
	// ready depths its sampler (an owner loop) reads.
	hist *history.Recorder
	// fired is the list last given to the firer (setFired), read by the
	// dashboard (firedSchedules).
	fired atomic.Pointer[[]*periodic.Compiled]
	// inspector serves the dashboard.
	inspector *inspect.Inspector
	replica   string
	listener  net.Listener
	// registryEvery is watchRegistry's period (registryCheck);
	// registryPoke asks it to check at once (watchSchedules).
	registryEvery time.Duration
	registryPoke  chan struct{}
	// layout follows the layout record (layout.go); relayout asks
	// watchSchedules to register the queues again after a change.
	layout   *shard.Follower
	relayout chan struct{}
	// warnedShards is set once the configured shard count was reported
	// as overridden by the layout record (onLayout).
	warnedShards atomic.Bool
	// starting is set until the queues are registered (nil after), with
	// the last registration error: /readyz reports it.
	starting atomic.Pointer[startState]
	// registered is closed once the queues are registered (Registered).
	registered     chan struct{}
	registeredOnce sync.Once
	// redisClosed closes rdb once: a shutdown with Redis calls stuck
	// closes it early (Run), Close at the end.
	redisClosed sync.Once
}

// startState is what a starting replica waits for.
type startState struct{ err error }

// New connects to Redis and etcd (lazily: nothing is sent yet) and builds
// the replica's components. It binds the HTTP listener so an address in
// use is reported at start.
func New(cfg *config.Config, log hclog.Logger) (*Scheduler, error) {
	l, err := shard.NewLayout(cfg.Namespace, cfg.Shards)
	if err != nil {
		return nil, err
	}
	s := &Scheduler{cfg: cfg, log: log, reg: prometheus.NewRegistry(), registryEvery: registryCheck,
		registryPoke: make(chan struct{}, 1), relayout: make(chan struct{}, 1), registered: make(chan struct{})}
	s.starting.Store(&startState{})
	s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.replica = cfg.Scheduler.ReplicaID
	if s.replica == "" {
		host, _ := os.Hostname()
		s.replica = replicaIDFor(host, os.Getpid())
	}
	if s.rdb, err = connect.RedisAs(cfg.Redis, procs.ConnName(cfg.Namespace, s.replica)); err != nil {
		return nil, err
	}
	if s.etcd, err = connect.Etcd(cfg.Etcd); err != nil {
		s.rdb.Close()
		return nil, err
	}
	s.store = shard.NewStore(s.rdb, l)
	s.store.SetTaskEncoding(cfg.Encoding())
	met := scan.NewMetrics(s.reg)
	s.waker = scan.NewWaker(s.rdb, log, met)
	s.hist = history.NewRecorder(s.store, log)
	sampler := history.NewSampler(s.store, s.hist)
	mc := cfg.ForMover()
	mc.Logger, mc.Metrics, mc.Moved = log, met, sampler.Moved
	s.mover, err = scan.NewMover(s.store, mc)
	if err != nil {
		s.Close()
		return nil, err
	}
	rc := cfg.ForRecovery()
	rc.Logger, rc.Metrics, rc.History = log, recovery.NewMetrics(s.reg), s.hist
	s.recovery, err = recovery.New(s.store, rc)
	if err != nil {
		s.Close()
		return nil, err
	}
	// The work of a shard's owner, started and stopped together under the
	// shard's epoch (internal/owner): one line per loop.
	schedules, err := cfg.Schedules()
	if err != nil {
		s.Close()
		return nil, err
	}
	s.schedules = schedules
	fc := cfg.ForFire()
	fc.Schedules, fc.Logger, fc.Metrics, fc.History = schedules, log, fire.NewMetrics(s.reg), s.hist
	if s.firer, err = fire.New(s.store, fc); err != nil {
		s.Close()
		return nil, err
	}
	s.fired.Store(&schedules)
	rsc := cfg.ForReshard()
	rsc.Logger, rsc.Metrics, rsc.Schedules, rsc.Paused = log, reshard.NewMetrics(s.reg), s.firer.Names, s.store.Paused
	if s.resharder, err = reshard.New(s.store, rsc); err != nil {
		s.Close()
		return nil, err
	}
	s.reg.MustRegister(layoutGauges(s.store)...)
	s.reg.MustRegister(newOperationsCollector(s.store))
	if s.layout, err = s.store.Follow(shard.FollowConfig{Refresh: cfg.LayoutRefresh, FinishStalled: true, Logger: log, OnChange: s.onLayout}); err != nil {
		s.Close()
		return nil, err
	}
	s.loops = []owner.Loop{
		{Name: "mover", Run: s.mover.Run},
		{Name: "recovery", Run: s.recovery.Run},
		{Name: "periodic", Run: s.firer.Run},
		{Name: "reshard", Run: s.resharder.Run},
		{Name: "history", Run: func(ctx context.Context, sh owner.Shard) error { return sampler.Run(ctx, sh.ID) }},
	}
	ec := cfg.ForElection(s.replica)
	ec.Logger, ec.Registerer = log, s.reg
	s.election, err = election.New(s.etcd, ec, s.runShard)
	if err != nil {
		s.Close()
		return nil, err
	}
	s.reg.MustRegister(depth.New(s.store, s.Owned, log))
	s.inspector, err = inspect.New(s.rdb, inspect.Config{Namespace: cfg.Namespace, Shards: cfg.Shards,
		Owners: etcdowners.New(s.etcd, cfg.Namespace)})
	if err != nil {
		s.Close()
		return nil, err
	}
	s.reg.MustRegister(newEligibleCollector(s.inspector, slices.Sorted(maps.Keys(cfg.Queues))))
	if cfg.HTTP.Addr != "" {
		if s.listener, err = net.Listen("tcp", cfg.HTTP.Addr); err != nil {
			s.Close()
			return nil, fmt.Errorf("listen on http.addr %s: %w", cfg.HTTP.Addr, err)
		}
	}
	return s, nil
}

// replicaIDFor is the replica id of process pid on host when none is
// configured, "host-pid", made to fit election.ReplicaIDRule: characters
// the rule does not allow become "-", and a long host name loses its
// start (generated names, as a Kubernetes pod's, end in their unique
// part; a container's pid is often 1).
func replicaIDFor(host string, pid int) string {
	host = strings.Map(func(r rune) rune {
		if r < utf8.RuneSelf && (r == '.' || r == '_' || r == '-' || unicode.IsLetter(r) || unicode.IsDigit(r)) {
			return r
		}
		return '-'
	}, host)
	suffix := "-" + strconv.Itoa(pid)
	if room := 64 - len(suffix); len(host) > room {
		host = host[len(host)-room:]
	}
	return host + suffix
}

// ReplicaID returns the replica's identity in the election.
func (s *Scheduler) ReplicaID() string { return s.replica }

// Registered is closed once Run has registered the configured queues:
// from then on producers can enqueue to them.
func (s *Scheduler) Registered() <-chan struct{} { return s.registered }

// runShard is the election's RunFunc: the owner's loops for one owned
// shard, with its producers' wake-ups. If a loop is fenced off by a newer
// owner, all stop and the election gives the shard up.
func (s *Scheduler) runShard(ctx context.Context, sh int, epoch int64) {
	// The election logs the acquisition and the release at Info; the
	// loops log what they retry; what ended them is logged here, once.
	log := s.log.With("shard", sh, "epoch", epoch)
	log.Debug("owner loops starting")
	wake, unsubscribe, subscribed := s.waker.Subscribe(ctx, s.store.Layout().WakeChannel(sh))
	defer unsubscribe()
	if err := owner.Run(ctx, owner.Shard{ID: sh, Epoch: epoch, Wake: wake, Subscribed: subscribed}, s.loops); err != nil {
		log.Warn("owner loops stopped", "error", err) // a newer owner fenced the shard
		return
	}
	log.Debug("owner loops stopped")
}

// Run runs the replica until ctx ends, then shuts down in the order the
// package comment gives. It returns nil after a clean shutdown.
func (s *Scheduler) Run(ctx context.Context) error {
	s.log.Info("starting scheduler", "replica", s.replica, "shards", s.cfg.Shards, "namespace", s.cfg.Namespace)
	// HTTP first: /healthz and /readyz answer from the first second,
	// also while Redis is unreachable and the queues wait to be
	// registered (/readyz then says why).
	var wg sync.WaitGroup
	// Requests run under ctx: a dashboard call in flight at shutdown ends
	// with it, before Close closes the clients it uses.
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	if s.listener != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Serve(s.listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("http server failed", "error", err)
			}
		}()
		// Before "serving http": a reader of that line has seen this one.
		if s.cfg.HTTP.ExposesWritableDashboard() {
			s.log.Warn("the dashboard is writable, has no auth and listens on a non-loopback address: whoever reaches "+
				s.listener.Addr().String()+" can pause queues and replay, purge or cancel tasks; set http.dashboard.read_only, "+
				"or http.dashboard.username and password, or bind http.addr to loopback (docs/dashboard.md)", "addr", s.listener.Addr().String())
		}
		s.log.Info("serving http", "addr", s.listener.Addr().String())
	}
	if s.cfg.Etcd.TLS.Enabled {
		// The etcd client would only ever say "context deadline exceeded".
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if err := connect.CheckEtcdTLS(cctx, s.cfg.Etcd); err != nil {
			s.log.Error("etcd TLS check failed: this replica will own no shard until etcd accepts it", "error", err)
		}
		cancel()
	}
	err := s.registerQueues(ctx)
	if err == nil {
		wctx, stopWatch := context.WithCancel(ctx)
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.watchRegistry(wctx)
		}()
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.watchSchedules(wctx)
		}()
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.layout.Run(wctx)
		}()
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.registerSelf(wctx)
		}()

		// A call in flight when ctx ends blocks in its read until the
		// client's read timeout (3 s) if Redis does not answer (paused,
		// partitioned): go-redis ends a call on its ctx's deadline, not on
		// its cancellation. So if the owner loops have not stopped
		// shortly after ctx ended, the Redis connections are closed,
		// which ends those calls at once; then the lease is revoked.
		elected := make(chan struct{})
		stopCalls := context.AfterFunc(ctx, func() {
			select {
			case <-elected:
			case <-time.After(shutdownCallGrace):
				s.log.Warn("Redis calls still in flight at shutdown: closing the Redis connections", "after", shutdownCallGrace)
				s.closeRedis()
			}
		})
		err = s.election.Run(ctx) // returns after movers stopped and the lease is revoked
		close(elected)
		stopCalls()
		stopWatch()
	}

	s.waker.Close()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hctx, hcancel := context.WithTimeout(shutdownCtx, history.FlushTimeout)
	_ = s.hist.Close(hctx) // after the owner loops: what they counted goes too
	hcancel()
	_ = srv.Shutdown(shutdownCtx)
	wg.Wait()
	s.log.Info("scheduler stopped")
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// registerSelf keeps this replica's entry in the process registry
// (package procs) until ctx ends: written once, deleted at the end.
func (s *Scheduler) registerSelf(ctx context.Context) {
	queues := make(map[string]int, len(s.cfg.Queues))
	for q := range s.cfg.Queues {
		queues[q] = 0
	}
	me := procs.Self(s.replica, procs.RoleScheduler, version.Short(), queues)
	me.Named = true // connect.RedisAs names every connection
	r := procs.New(s.rdb, s.cfg.Namespace, me)
	r.Run(ctx, func(err error) {
		if err != nil {
			s.log.Warn("process registry: could not write this replica's entry; trying again", "error", err)
		} else {
			s.log.Info("process registry: this replica's entry written again")
		}
	})
}

// shutdownCallGrace is how long Run's shutdown lets the owner loops'
// Redis calls finish before it closes the connections under them.
const shutdownCallGrace = 200 * time.Millisecond

// closeRedis closes the Redis client once (Run's shutdown, Close).
func (s *Scheduler) closeRedis() error {
	var err error
	s.redisClosed.Do(func() { err = s.rdb.Close() })
	return err
}

// Close releases the Redis and etcd clients and the listener if Run did
// not run.
func (s *Scheduler) Close() error {
	var errs []error
	if s.listener != nil {
		_ = s.listener.Close() // already closed by Shutdown after Run
	}
	if s.etcd != nil {
		errs = append(errs, s.etcd.Close())
	}
	if s.rdb != nil {
		errs = append(errs, s.closeRedis())
	}
	return errors.Join(errs...)
}
