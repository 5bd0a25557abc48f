// Package scheduler assembles a scheduler replica: it joins the etcd
// election for shards, runs the owner's loops (internal/owner: the mover,
// the recovery loop and the periodic schedules' firing) for every shard it owns, registers the
// configured queues in Redis and serves /metrics, /healthz, /readyz,
// /v1/status and the web dashboard (/ui/, internal/dashboard).
//
// Shutdown order (Run's ctx cancelled): the election cancels every
// shard's loops and waits for them (each unsubscribes its shard's
// wake-ups), then revokes the replica's lease so other replicas take the
// shards at once; then the waker closes what pub/sub connections remain;
// then the HTTP server; Close releases the Redis and etcd clients.
package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
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
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/backoff"
	"github.com/hourglass-sched/hourglass/internal/config"
	"github.com/hourglass-sched/hourglass/internal/connect"
	"github.com/hourglass-sched/hourglass/internal/dashboard"
	"github.com/hourglass-sched/hourglass/internal/depth"
	"github.com/hourglass-sched/hourglass/internal/election"
	"github.com/hourglass-sched/hourglass/internal/fanout"
	"github.com/hourglass-sched/hourglass/internal/fire"
	"github.com/hourglass-sched/hourglass/internal/owner"
	"github.com/hourglass-sched/hourglass/internal/recovery"
	"github.com/hourglass-sched/hourglass/internal/scan"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/periodic"
)

// Scheduler is one scheduler replica.
type Scheduler struct {
	cfg      *config.Config
	log      hclog.Logger
	rdb      redis.UniversalClient
	etcd     *clientv3.Client
	store    *shard.Store
	reg      *prometheus.Registry
	waker    *scan.Waker
	mover    *scan.Mover
	recovery *recovery.Recoverer
	loops    []owner.Loop
	election *election.Manager
	// firer fires the periodic schedules: the configured ones
	// (schedules) and those registered at run time (watchSchedules).
	firer     *fire.Firer
	schedules []*periodic.Compiled
	// fired is the list last given to the firer (setFired), read by the
	// dashboard (firedSchedules).
	fired atomic.Pointer[[]*periodic.Compiled]
	// inspector serves the dashboard.
	inspector *inspect.Inspector
	replica   string
	listener  net.Listener
	// registryEvery is watchRegistry's period (registryCheck).
	registryEvery time.Duration
	// starting is set until the queues are registered (nil after), with
	// the last registration error: /readyz reports it.
	starting atomic.Pointer[startState]
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
	s := &Scheduler{cfg: cfg, log: log, reg: prometheus.NewRegistry(), registryEvery: registryCheck}
	s.starting.Store(&startState{})
	s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.replica = cfg.Scheduler.ReplicaID
	if s.replica == "" {
		host, _ := os.Hostname()
		s.replica = replicaIDFor(host, os.Getpid())
	}
	if s.rdb, err = connect.Redis(cfg.Redis); err != nil {
		return nil, err
	}
	if s.etcd, err = connect.Etcd(cfg.Etcd); err != nil {
		s.rdb.Close()
		return nil, err
	}
	s.store = shard.NewStore(s.rdb, l)
	met := scan.NewMetrics(s.reg)
	s.waker = scan.NewWaker(s.rdb, log, met)
	mc := cfg.ForMover()
	mc.Logger, mc.Metrics = log, met
	s.mover, err = scan.NewMover(s.store, mc)
	if err != nil {
		s.Close()
		return nil, err
	}
	rc := cfg.ForRecovery()
	rc.Logger, rc.Metrics = log, recovery.NewMetrics(s.reg)
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
	s.firer = fire.New(s.store, fire.Config{Schedules: schedules, Logger: log, Metrics: fire.NewMetrics(s.reg)})
	s.fired.Store(&schedules)
	s.loops = []owner.Loop{
		{Name: "mover", Run: s.mover.Run},
		{Name: "recovery", Run: s.recovery.Run},
		{Name: "periodic", Run: s.firer.Run},
	}
	ec := cfg.ForElection(s.replica)
	ec.Logger, ec.Registerer = log, s.reg
	s.election, err = election.New(s.etcd, ec, s.runShard)
	if err != nil {
		s.Close()
		return nil, err
	}
	s.reg.MustRegister(depth.New(s.store, s.ownedShards, log))
	s.inspector, err = inspect.New(inspect.Options{Redis: s.rdb, Namespace: cfg.Namespace, Shards: cfg.Shards,
		Etcd: s.etcd, ElectionPrefix: ec.Prefix})
	if err != nil {
		s.Close()
		return nil, err
	}
	if cfg.HTTP.Addr != "" {
		if s.listener, err = net.Listen("tcp", cfg.HTTP.Addr); err != nil {
			s.Close()
			return nil, fmt.Errorf("scheduler: listen on http.addr %s: %w", cfg.HTTP.Addr, err)
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

// runShard is the election's RunFunc: the owner's loops for one owned
// shard, with its producers' wake-ups. If a loop is fenced off by a newer
// owner, all stop and the election gives the shard up.
func (s *Scheduler) runShard(ctx context.Context, sh int, epoch int64) {
	// The election logs the acquisition and the release at Info.
	log := s.log.With("shard", sh, "epoch", epoch)
	log.Debug("owner loops starting")
	defer log.Debug("owner loops stopped")
	wake, unsubscribe := s.waker.Subscribe(ctx, s.store.Layout().WakeChannel(sh))
	defer unsubscribe()
	_ = owner.Run(ctx, owner.Shard{ID: sh, Epoch: epoch, Wake: wake}, s.loops, s.log)
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
		err = s.election.Run(ctx) // returns after movers stopped and the lease is revoked
		stopWatch()
	}

	s.waker.Close()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)
	wg.Wait()
	s.log.Info("scheduler stopped")
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// watchSchedules keeps the firer's schedules current until ctx ends: the
// configured ones, and those registered at run time (inspect.SetSchedule)
// whose names the configuration does not use, re-read when a change is
// announced on the control channel and every registryEvery.
func (s *Scheduler) watchSchedules(ctx context.Context) {
	hub := fanout.New(s.rdb, fanout.Classic, s.log)
	defer hub.Close()
	changed, stop := hub.Signal(ctx, s.store.Layout().ControlChannel(), nil)
	defer stop()
	tick := time.NewTicker(s.registryEvery)
	defer tick.Stop()
	var warned string
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		reg, err := s.inspector.RegisteredSchedules(cctx)
		cancel()
		if err != nil && reg == nil {
			// Redis unreachable: keep the schedules as they are.
		} else {
			if err != nil && err.Error() != warned {
				warned = err.Error()
				s.log.Warn("registered schedules that do not decode are not fired", "error", err)
			}
			s.setFired(s.withRegistered(reg))
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-tick.C:
		}
	}
}

// withRegistered returns the configured schedules and those of reg whose
// names the configuration does not use.
func (s *Scheduler) withRegistered(reg []*periodic.Compiled) []*periodic.Compiled {
	return append(slices.Clone(s.schedules), periodic.Unshadowed(s.schedules, reg)...)
}

// setFired gives the firer ss, and keeps ss for firedSchedules.
func (s *Scheduler) setFired(ss []*periodic.Compiled) {
	s.fired.Store(&ss)
	s.firer.SetSchedules(ss)
}

// firedSchedules returns the schedules the firer fires now (the list is
// replaced, never changed in place: callers must not change it).
func (s *Scheduler) firedSchedules() []*periodic.Compiled { return *s.fired.Load() }

// registryCheck is how often a replica checks that Redis still holds the
// registration marker (one EXISTS); tests shorten Scheduler.registryEvery.
const registryCheck = 5 * time.Second

// watchRegistry registers the queues again whenever the marker written
// by registerQueues is gone: Redis restarted without its data, or was
// flushed, and producers would get "unknown queue" until a scheduler
// restarted. Queues registered or changed at run time (hourglass queue
// set) are lost with the data; the configured ones come back. It returns
// when ctx ends.
func (s *Scheduler) watchRegistry(ctx context.Context) {
	tick := time.NewTicker(s.registryEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		n, err := s.rdb.Exists(cctx, s.store.Layout().Registered()).Result()
		cancel()
		if err != nil || n == 1 {
			continue // Redis unreachable: /readyz says so; checked again later
		}
		s.log.Warn("Redis lost the queue registry (restarted without its data, or flushed); registering the configured queues again")
		if err := s.registerQueues(ctx); err != nil {
			return // ctx ended
		}
	}
}

// registerQueues writes the registration marker, the configured queue
// policies and the far tier's settings to every shard, retrying while
// Redis is unreachable.
func (s *Scheduler) registerQueues(ctx context.Context) error {
	policies, far := s.cfg.QueuePolicies(), s.cfg.FarTier()
	bo := backoff.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	for {
		// Each attempt within a second, so that /readyz says within about
		// a second why the replica is not ready.
		actx, cancel := context.WithTimeout(ctx, time.Second)
		// The marker first: data lost after it (a flush between the two
		// writes included) takes the marker with it, and watchRegistry
		// registers again.
		err := s.rdb.Set(actx, s.store.Layout().Registered(), s.replica, 0).Err()
		if err == nil {
			err = s.store.RegisterQueues(actx, policies)
		}
		if err == nil {
			err = s.store.SetFarTier(actx, far)
		}
		cancel()
		if err == nil {
			s.starting.Store(nil)
			return nil
		}
		s.starting.Store(&startState{err: err})
		s.log.Warn("registering queues failed; retrying", "error", err)
		if bo.Wait(ctx); ctx.Err() != nil {
			return fmt.Errorf("scheduler: register queues: %w", err)
		}
	}
}

// Status is the body of GET /v1/status.
type Status struct {
	Replica string        `json:"replica"`
	Ready   bool          `json:"ready"`
	Members []string      `json:"members"`
	Shards  []ShardStatus `json:"shards"`
}

// FetchStatus reads GET /v1/status of the replica whose HTTP endpoint
// listens on addr (host:port).
func FetchStatus(ctx context.Context, addr string) (Status, error) {
	var st Status
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v1/status", nil)
	if err != nil {
		return st, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, fmt.Errorf("scheduler: status of %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("scheduler: status of %s: %s", addr, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, fmt.Errorf("scheduler: status of %s: %w", addr, err)
	}
	return st, nil
}

// ShardStatus is one owned shard in Status.
type ShardStatus struct {
	Shard int   `json:"shard"`
	Epoch int64 `json:"epoch"`
}

// Handler returns the replica's HTTP handler.
func (s *Scheduler) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg}))
	if d := s.cfg.HTTP.Dashboard; d.Enabled {
		ui := dashboard.New(dashboard.Options{Inspector: s.inspector, Gatherer: s.reg, ReadOnly: d.ReadOnly,
			Username: d.Username, Password: d.Password, AllowedHosts: d.AllowedHosts, Log: s.log.Named("dashboard"),
			Schedules: s.firedSchedules})
		mux.Handle("/ui/", ui)
		mux.Handle("GET /{$}", http.RedirectHandler("/ui/", http.StatusFound))
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		if st := s.starting.Load(); st != nil {
			msg := "not ready: starting: registering queues"
			if st.err != nil {
				msg += " failed (retrying): " + st.err.Error()
			}
			http.Error(w, msg, http.StatusServiceUnavailable)
			return
		}
		if !s.election.Ready() {
			http.Error(w, "not ready: no valid etcd lease", http.StatusServiceUnavailable)
			return
		}
		if err := s.rdb.Ping(ctx).Err(); err != nil {
			http.Error(w, "not ready: redis: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.Status())
	})
	return mux
}

// Status returns the replica's current view.
func (s *Scheduler) Status() Status {
	st := Status{Replica: s.replica, Ready: s.election.Ready(), Members: s.election.Members(), Shards: []ShardStatus{}}
	for sh, e := range s.election.Owned() {
		st.Shards = append(st.Shards, ShardStatus{Shard: sh, Epoch: e})
	}
	sort.Slice(st.Shards, func(i, j int) bool { return st.Shards[i].Shard < st.Shards[j].Shard })
	return st
}

// ownedShards returns the shards this replica owns now.
func (s *Scheduler) ownedShards() []int {
	owned := s.election.Owned()
	out := make([]int, 0, len(owned))
	for sh := range owned {
		out = append(out, sh)
	}
	return out
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
		errs = append(errs, s.rdb.Close())
	}
	return errors.Join(errs...)
}
