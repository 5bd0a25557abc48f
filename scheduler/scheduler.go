// Package scheduler runs an Hourglass scheduler replica inside a Go
// program: the same replica as the scheduler binary (cmd/scheduler, a
// thin shell over this package), built from a Config struct instead of a
// file.
//
// A replica competes through etcd for the ownership of shards, moves the
// due tasks of the shards it owns into their ready lists, re-delivers
// expired leases, applies retries and the dead-letter queue, fires the
// periodic schedules, registers the configured queues in Redis and serves
// /metrics, /healthz, /readyz and the dashboard when Settings.HTTP.Addr is
// set. Any number of replicas, in-process or binaries, may run for one
// deployment (one Namespace); each shard has one owner at a time.
//
//	cfg := scheduler.DefaultConfig()
//	cfg.Redis.Addr = "127.0.0.1:6379"
//	cfg.Etcd.Endpoints = []string{"127.0.0.1:2379"}
//	cfg.Queues["emails"] = scheduler.DefaultQueue()
//	s, err := scheduler.New(cfg)
//	if err != nil { ... }
//	defer s.Close()             // 3. release the connections
//	ctx, stop := context.WithCancel(ctx)
//	done := make(chan error)
//	go func() { done <- s.Run(ctx) }()
//	defer func() { stop(); <-done }() // 2. resign the shards, wait for Run
//	err = s.Ready(ctx)          // 1. the queues are registered: enqueue
//
// DefaultConfig leaves the HTTP endpoint off (the binary listens on
// 127.0.0.1:9464): set Settings.HTTP.Addr, or serve Handler on the
// program's own server.
//
// Package hourglasstest starts Redis, etcd and a replica for a test.
package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/hourglass-sched/hourglass"
	"github.com/hourglass-sched/hourglass/internal/config"
	"github.com/hourglass-sched/hourglass/internal/errtext"
	"github.com/hourglass-sched/hourglass/internal/logbridge"
	isched "github.com/hourglass-sched/hourglass/internal/scheduler"
)

// Settings is a deployment's configuration as the binaries read it from
// their YAML file: every key of configs/scheduler.example.yaml is the
// field of the same name (redis.addr is Settings.Redis.Addr). Each
// setting's range, unit, default and what its zero means are listed once,
// in docs/operations.md's settings tables (and `go doc
// github.com/hourglass-sched/hourglass/internal/config Config` lists the
// fields). Start from DefaultConfig or DefaultSettings, or read a file
// with LoadSettings.
type Settings config.Config

// QueueSettings configures one queue (a value of Settings.Queues); start
// from DefaultQueue, whose fields are the defaults (a literal's zero
// fields are not: a zero MaxRetries means never retry).
type QueueSettings = config.QueueConfig

// BackoffSettings is a queue's retry delay (QueueSettings.Backoff).
type BackoffSettings = config.BackoffConfig

// RateLimitSettings caps a queue's dispatches (QueueSettings.RateLimit).
type RateLimitSettings = config.RateLimitConfig

// PeriodicSettings declares one periodic schedule (a value of
// Settings.Periodic).
type PeriodicSettings = config.PeriodicConfig

// DefaultSettings returns the binary's defaults: one queue named
// "default", Redis at 127.0.0.1:6379, etcd at 127.0.0.1:2379, 16 shards,
// the HTTP endpoint on 127.0.0.1:9464.
func DefaultSettings() Settings { return Settings(config.Default()) }

// DefaultQueue returns the settings of a queue declared without any.
func DefaultQueue() QueueSettings { return config.DefaultQueue() }

// LoadSettings reads a YAML configuration file as the scheduler binary
// does (without its HOURGLASS_* environment variables and flags) over
// the defaults, and validates it. An error names the key at fault and
// wraps hourglass.ErrInvalidConfig.
func LoadSettings(path string) (Settings, error) {
	cfg, err := config.Load([]string{"-config", path}, nil)
	if err != nil {
		return Settings{}, invalid(err)
	}
	return Settings(*cfg), nil
}

// invalid words the configuration's problems (errors joined, each
// "config: key: what") as one error wrapping hourglass.ErrInvalidConfig:
// "hourglass: invalid config: key: what; key: what".
func invalid(err error) error {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	parts := make([]string, 0, len(errs))
	for _, e := range errs {
		for _, line := range strings.Split(e.Error(), "\n") {
			parts = append(parts, strings.TrimPrefix(line, "config: "))
		}
	}
	return errtext.Errorf("%w: %s", hourglass.ErrInvalidConfig, strings.Join(parts, "; "))
}

// Config configures an in-process replica: the deployment's Settings,
// embedded so that cfg.Redis.Addr names a setting, and where it logs.
type Config struct {
	Settings
	// Slog receives the replica's logs, for a program that logs with
	// log/slog; nil means slog.Default(). The handler's level decides
	// what is logged (Settings.Log applies to the binaries only). Set
	// Slog or Logger, not both.
	Slog *slog.Logger
	// Logger receives the replica's logs as hclog records; the binary
	// sets it. Set Slog or Logger, not both.
	Logger hclog.Logger
}

// DefaultConfig returns a Config with DefaultSettings but the HTTP
// endpoint off (Settings.HTTP.Addr empty: two replicas in one process
// would contend for the port), logging to slog.Default().
func DefaultConfig() Config {
	c := Config{Settings: DefaultSettings()}
	c.HTTP.Addr = ""
	return c
}

// Validate reports every setting New cannot use; the error wraps
// hourglass.ErrInvalidConfig and names each key.
func (c Config) Validate() error {
	var errs []error
	settings := config.Config(c.Settings)
	if err := settings.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Slog != nil && c.Logger != nil {
		errs = append(errs, errors.New("Slog: must be nil when Logger is set (set one logger)"))
	}
	if len(errs) > 0 {
		return invalid(errors.Join(errs...))
	}
	return nil
}

// Scheduler is one scheduler replica running in this process.
type Scheduler struct {
	s *isched.Scheduler
	// done is closed when Run returns: Ready stops waiting.
	done chan struct{}
}

// New validates cfg and builds a replica. A zero setting whose zero
// means its default (docs/operations.md) gets the default. It connects lazily (nothing is
// sent before Run) but binds Settings.HTTP.Addr, if set, so that an
// address in use is reported here. Close releases what New took.
func New(cfg Config) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = logbridge.New(cfg.Slog).Named("scheduler")
	}
	settings := config.Config(cfg.Settings).Clone() // the replica shares no map with the caller
	settings.ApplyDefaults()
	s, err := isched.New(&settings, log)
	if err != nil {
		return nil, errtext.Errorf("%w", err)
	}
	return &Scheduler{s: s, done: make(chan struct{})}, nil
}

// Run runs the replica until ctx ends. Shutting down, it stops the work
// of every shard it owns and resigns them, so other replicas take them
// over at once, then returns nil. It returns an error only for a failure
// that stops the replica for good (etcd refusing it, for one); Redis or
// etcd being unreachable for a while is retried and logged. Call Run
// once.
func (s *Scheduler) Run(ctx context.Context) error {
	defer close(s.done)
	err := s.s.Run(ctx)
	if err == nil || ctx.Err() != nil {
		return nil // stopped by ctx, whatever was in flight then
	}
	return errtext.Errorf("%w", err)
}

// ErrStopped is returned by Ready when Run returned before the queues
// were registered.
var ErrStopped = errors.New("hourglass: the scheduler stopped")

// Ready waits until Run has registered the configured queues in Redis,
// from when producers can enqueue to them, or Run returned (ErrStopped),
// or ctx ends.
func (s *Scheduler) Ready(ctx context.Context) error {
	select {
	case <-s.s.Registered():
		return nil
	case <-s.done:
		select {
		case <-s.s.Registered():
			return nil
		default:
			return ErrStopped
		}
	case <-ctx.Done():
		return errtext.Errorf("waiting for the scheduler to register the queues: %w", context.Cause(ctx))
	}
}

// ReplicaID returns the replica's identity in the election: the
// configured scheduler.replica_id, else host and process id.
func (s *Scheduler) ReplicaID() string { return s.s.ReplicaID() }

// Owned returns the shards this replica owns now, in no order.
func (s *Scheduler) Owned() []int { return s.s.Owned() }

// Handler returns the replica's HTTP handler (/metrics, /healthz,
// /readyz, /v1/status and the dashboard if enabled), for a program that
// serves it on its own server instead of Settings.HTTP.Addr.
func (s *Scheduler) Handler() http.Handler { return s.s.Handler() }

// Close releases the Redis and etcd connections and the HTTP listener.
// Call it after Run returned (or instead of Run): a replica closed under
// a running Run cannot resign its shards, so other replicas wait out
// its lease before they take them.
func (s *Scheduler) Close() error { return s.s.Close() }
