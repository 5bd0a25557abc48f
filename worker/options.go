package worker

import (
	"log/slog"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/hourglass-sched/hourglass/internal/confcheck"
	"github.com/hourglass-sched/hourglass/internal/errtext"
	"github.com/hourglass-sched/hourglass/internal/logbridge"
	"github.com/hourglass-sched/hourglass/internal/procs"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/version"
)

// Defaults, the limits Validate enforces, and the names of "none". Each
// is stated once, here; the worker binary's configuration
// (internal/config) refers to them.
//
// DefaultConfig and DefaultQueueOptions return the defaults: what the
// worker binary runs with unless configured. A zero field means the
// default where the setting has no "off" (Concurrency, FetchTimeout,
// RegistrationWait, RatePeriod, Burst); where it has one (ShutdownGrace, AckLinger,
// HandlerTimeout, LeaseAfter), zero means off, as the binary's
// configuration key's 0 does, and the default is DefaultConfig's or
// DefaultQueueOptions'.
const (
	DefaultNamespace = shard.DefaultNamespace
	DefaultShards    = shard.DefaultShards

	// DefaultShutdownGrace is DefaultConfig's ShutdownGrace. NoGrace, the
	// zero value, releases running tasks at shutdown without waiting for
	// their handlers.
	DefaultShutdownGrace               = 30 * time.Second
	NoGrace              time.Duration = 0

	// DefaultFetchTimeout is Config.FetchTimeout when unset; it must be a
	// whole number of seconds from MinFetchTimeout to MaxFetchTimeout
	// (Redis's BLMPOP takes whole seconds as go-redis sends it). It was
	// 2 s: an idle worker's fetch was half a Redis command per second.
	// A pop in flight ends at once when Run's ctx ends or the layout
	// changes (blockpop.go), so a long one delays neither.
	DefaultFetchTimeout = 30 * time.Second
	MinFetchTimeout     = time.Second
	MaxFetchTimeout     = time.Minute

	// DefaultAckLinger is DefaultConfig's AckLinger: at a steady 2,000
	// tasks/s it cuts Redis's round trips per task by about a fifth. It is
	// at most MaxAckLinger (see internal/shard's timing.go); NoAckLinger,
	// the zero value, sends acknowledgements without waiting for others.
	DefaultAckLinger               = 2 * time.Millisecond
	MaxAckLinger                   = shard.MaxAckLinger
	NoAckLinger      time.Duration = 0

	// DefaultConcurrency is QueueOptions.Concurrency when unset, at most
	// MaxConcurrency.
	DefaultConcurrency = 10
	MaxConcurrency     = 10000

	// DefaultHandlerTimeout is DefaultQueueOptions' HandlerTimeout, so
	// that a hung handler (a partner that never answers) frees its slot
	// and its task within a minute instead of holding them; a handler
	// that needs longer sets a longer one. NoTimeout, the zero value,
	// runs handlers without a bound.
	DefaultHandlerTimeout               = time.Minute
	NoTimeout             time.Duration = 0

	// DefaultLeaseAfter is DefaultQueueOptions' LeaseAfter, at most
	// MaxLeaseAfter (see internal/shard's timing.go); LeaseFirst, the zero
	// value, leases every task before its handler starts.
	DefaultLeaseAfter               = 100 * time.Millisecond
	MaxLeaseAfter                   = shard.MaxLeaseAfter
	LeaseFirst        time.Duration = 0

	// DefaultRegistrationWait is Config.RegistrationWait when unset: long
	// enough for a scheduler started with (or just after) the worker, as
	// in a rolling deploy, to register the queues; short enough that a
	// wrong namespace or queue name stops the worker within its first
	// minute instead of leaving it idle.
	DefaultRegistrationWait = time.Minute

	// MinLease is the shortest QueueOptions.Lease.
	MinLease = 10 * time.Millisecond

	// MaxClusterConcurrency bounds QueueOptions.MaxConcurrency.
	MaxClusterConcurrency = shard.MaxClusterConcurrency
	// MaxRate and MaxBurst bound QueueOptions.Rate and Burst;
	// DefaultRatePeriod and DefaultBurst apply when Rate is set and they
	// are not; RatePeriod is at least MinRatePeriod.
	MaxRate           = shard.MaxRate
	MaxBurst          = shard.MaxBurst
	DefaultRatePeriod = time.Second
	MinRatePeriod     = shard.MinRatePeriod
	DefaultBurst      = 1
)

// DefaultConfig returns the worker's defaults, those the worker binary
// runs with: set Namespace and Shards (equal to the schedulers') and
// change what differs.
func DefaultConfig() Config {
	return Config{
		Namespace: DefaultNamespace, Shards: DefaultShards,
		ShutdownGrace: DefaultShutdownGrace, FetchTimeout: DefaultFetchTimeout, AckLinger: DefaultAckLinger,
		LayoutRefresh: shard.DefaultLayoutRefresh, RegistrationWait: DefaultRegistrationWait,
	}
}

// DefaultQueueOptions returns the defaults of consuming a queue, those
// the worker binary uses unless configured.
func DefaultQueueOptions() QueueOptions {
	return QueueOptions{
		Concurrency: DefaultConcurrency, HandlerTimeout: DefaultHandlerTimeout, LeaseAfter: DefaultLeaseAfter,
		RatePeriod: DefaultRatePeriod, Burst: DefaultBurst, Limiter: TokenBucket,
	}
}

// Config configures a Worker. Namespace and Shards must equal the
// schedulers'.
type Config struct {
	Namespace string
	Shards    int
	// ShutdownGrace is how long running handlers may finish after Run's
	// ctx ends, 0 or more; 0 (NoGrace) releases running tasks at once.
	// DefaultConfig's is DefaultShutdownGrace.
	ShutdownGrace time.Duration
	// FetchTimeout bounds one blocking fetch, in whole seconds from
	// MinFetchTimeout to MaxFetchTimeout; 0 means DefaultFetchTimeout. An
	// idle worker sends one command per FetchTimeout. A pop in flight is
	// ended at once when Run's ctx ends, except on a Ring, whose pops end
	// within FetchTimeout.
	FetchTimeout time.Duration
	// AckLinger is how long a successful delivery's acknowledgement may
	// wait for others to share its round trip to Redis, 0 to
	// MaxAckLinger; 0 (NoAckLinger) sends each batch at once.
	// DefaultConfig's is DefaultAckLinger. The handler's slot is free
	// meanwhile; an ack that still holds a slot or a flow-control permit
	// never waits.
	AckLinger time.Duration
	// ProcessID names the worker in the process registry (`hourglass ps`,
	// inspect.Processes; docs/operations.md, "Processes"); "" means
	// "<host>-<pid>-<4 hex digits>". The worker writes its entry when Run
	// starts, when its busy slots change (at most once per 5 s) and every
	// 10 minutes (every minute when its client does not name its
	// connections, below), and deletes it when Run's ctx ends. Its liveness is read
	// from the client name of its connections: the worker names the
	// connections of its blocking pops, and a client whose options set
	// ClientName to ConnName(namespace, ProcessID) names them all (the
	// worker binary's does; on a Redis Cluster it is the only way).
	ProcessID string
	// LayoutRefresh is how often the worker re-reads the layout record
	// (the shard count, docs/resharding.md) besides the announcements it
	// hears on the control channel, at least shard.MinLayoutRefresh; 0
	// means shard.DefaultLayoutRefresh (the layout follower's defaults).
	LayoutRefresh time.Duration
	// RegistrationWait bounds how long Run waits, from its start, for
	// every queue given to Handle to be registered by a scheduler in
	// Namespace (the schedulers register their configured queues at
	// start; the admin API and `hourglass queue set` at run time). Once
	// it has passed with a queue still unregistered, Run stops as when
	// its ctx ends and returns a *RegistrationError (ErrNotRegistered)
	// naming the namespace and the queues: a wrong namespace or queue name
	// fails instead of consuming nothing. Meanwhile the registered queues
	// are consumed. 0 or more; 0 means DefaultRegistrationWait (the check
	// cannot be off: a task of an unregistered queue cannot even be
	// enqueued). A wait shorter than a second fails at the first look
	// after it. See the package documentation, "Registration".
	RegistrationWait time.Duration
	// Slog receives the worker's logs, for a program that logs with
	// log/slog: records carry the component's name as the attribute
	// "logger" (for example "worker"), hclog's Trace is slog.LevelDebug-4,
	// and the handler's level decides what is logged. Set Slog or Logger,
	// not both; when neither is set the worker logs to slog.Default().
	Slog *slog.Logger
	// Logger receives the worker's logs through hclog, as the worker
	// binary sets it. Set Slog or Logger, not both.
	Logger hclog.Logger
	// Registerer receives the worker's metrics; nil: not registered.
	Registerer prometheus.Registerer
	// Version is the version this worker says it runs, for the queues'
	// routing (inspect.SetRouting: "only version X") and the process
	// registry; default: the module's version (internal/version). Tags
	// are its tags ("canary"), which a queue's routing may admit or
	// exclude. Each is 1..64 bytes of letters, digits and "._:+-".
	Version string
	Tags    []string
	// TracerProvider, when set, turns tracing on (docs/tracing.md): each
	// attempt of a task runs its handler in a span ("process <queue>",
	// kind consumer), the child of the producer's span the task carries
	// (client.Config.TracerProvider), or the root of a trace of its own
	// for a task that carries none; an attempt after a failed one links to
	// that attempt's span. The handler's ctx holds the span. nil (the
	// default) is off, at no cost.
	TracerProvider trace.TracerProvider
	// NoHistory turns off this worker's contribution to the queues'
	// minute history (docs/operations.md, "Queue history"): the tasks it
	// started (and how late), and those that succeeded, will be retried
	// or were dead-lettered. By default they are counted in memory and
	// written a few seconds later, one script call for every queue
	// together, nothing per task; Run writes what is left before it
	// returns.
	NoHistory bool
}

// Validate reports every field New cannot use, each error a
// *confcheck.FieldError naming the field and wrapping ErrInvalidConfig.
// Zero fields are valid: they mean the default or off, as each field
// says.
func (c Config) Validate() error {
	p := confcheck.New(ErrInvalidConfig)
	ns, n := shard.LayoutDefaults(c.Namespace, c.Shards)
	if !shard.ValidNamespace(ns) {
		p.Field("Namespace", "must match %s (got %q)", shard.NamespaceRule, ns)
	}
	p.IntRange("Shards", int64(n), 1, shard.MaxShards)
	p.DurationRange("ShutdownGrace", c.ShutdownGrace, 0, 0)
	if ft := c.FetchTimeout; ft != 0 {
		p.DurationRange("FetchTimeout", ft, MinFetchTimeout, MaxFetchTimeout)
		p.Whole("FetchTimeout", ft, time.Second)
	}
	p.DurationRange("AckLinger", c.AckLinger, 0, MaxAckLinger)
	if c.Slog != nil && c.Logger != nil {
		p.Field("Slog", "must be nil when Logger is set (set one logger)")
	}
	p.DurationRange("RegistrationWait", c.RegistrationWait, 0, 0)
	if c.Version != "" && !shard.ValidTag(c.Version) {
		p.Field("Version", "must be 1..64 bytes of letters, digits and ._:+- (got %q)", c.Version)
	}
	for i, t := range c.Tags {
		if !shard.ValidTag(t) {
			p.Field("Tags", "item %d must be 1..64 bytes of letters, digits and ._:+- (got %q)", i, t)
		}
	}
	if err := (shard.FollowConfig{Refresh: c.LayoutRefresh}).Validate(); err != nil {
		// The layout follower's rule: 0 is the default, else at least the
		// minimum.
		p.Field("LayoutRefresh", "must be at least %s (got %s)", shard.MinLayoutRefresh, c.LayoutRefresh)
	}
	return p.Err()
}

// withDefaults returns c with the zero fields that mean a default set to
// it.
func (c Config) withDefaults() Config {
	c.Namespace, c.Shards = shard.LayoutDefaults(c.Namespace, c.Shards)
	if c.FetchTimeout == 0 {
		c.FetchTimeout = DefaultFetchTimeout
	}
	if c.RegistrationWait == 0 {
		c.RegistrationWait = DefaultRegistrationWait
	}
	if c.Logger == nil {
		c.Logger = logbridge.New(c.Slog) // slog.Default() when nil
	}
	if c.ProcessID == "" {
		c.ProcessID = procs.DefaultID()
	}
	if c.Version == "" {
		c.Version = version.Short()
	}
	c.Tags = slices.Clone(c.Tags)
	return c
}

// ConnName returns the client name the process registry knows the
// connections of worker processID of namespace by: set it as the Redis
// client's ClientName (docs/operations.md, "Processes").
func ConnName(namespace, processID string) string {
	ns, _ := shard.LayoutDefaults(namespace, 0)
	return procs.ConnName(ns, processID)
}

// Backoff is an exponential retry delay: failed attempt n waits
// min(Cap, Base*Factor^(n-1)), half fixed and half random. Base is at
// least 1ms, Cap at least Base, Factor from 1 to 100.
type Backoff struct {
	Base, Cap time.Duration
	Factor    float64
}

// QueueOptions tune how one queue is consumed.
type QueueOptions struct {
	// Concurrency is the most handlers of this queue running at once in
	// this process, at most MaxConcurrency; 0 means DefaultConcurrency.
	// Up to as many tasks again may wait for their due time, popped ahead
	// of it (scheduler.prefetch), without a slot (not in a queue under
	// flow control: MaxConcurrency, Rate).
	Concurrency int
	// Lease overrides the visibility timeout, at least MinLease; 0 uses
	// each task's timeout (set at enqueue, default: the queue's).
	Lease time.Duration
	// HandlerTimeout bounds one handler run (its ctx deadline), 0 or
	// more; 0 (NoTimeout) means no bound. DefaultQueueOptions' is
	// DefaultHandlerTimeout. A timed-out
	// handler's error is a retryable failure; a handler that ignores its
	// ctx keeps its lease for one more lease period, then recovery
	// delivers the task again. With ManualAck it bounds the time to Ack.
	HandlerTimeout time.Duration
	// Backoff overrides the queue's registered backoff for this worker's
	// retries; zero uses the registered one.
	Backoff Backoff
	// ManualAck: a nil return leaves the delivery open until Task.Ack or
	// Task.Nack.
	ManualAck bool
	// LeaseAfter is how long a handler runs on a popped task before the
	// worker leases it. A ready entry carries its task, so the handler
	// starts as soon as the entry is popped; one that is settled within
	// LeaseAfter never takes a lease (a round trip and a script call
	// less per task), one still running then is leased and its lease
	// extended as usual. Until then the task is covered by recovery,
	// which takes a popped, unleased task back (counting a failed
	// attempt) no sooner than shard.UnleasedGrace (1 s) after the pop,
	// counted from when the pop was sent. A task whose pop is older than
	// MaxLeaseAfter before its handler starts (the pop blocked, or the
	// worker was paused) is leased first, and dropped unrun if recovery
	// took it back meanwhile. A worker that stalls longer than the grace
	// while the handler runs, or whose ack cannot reach Redis for that
	// long, may see the task run again, as after an expired lease. 0 to
	// MaxLeaseAfter; 0 (LeaseFirst) leases every task before its handler
	// starts. DefaultQueueOptions' is DefaultLeaseAfter (100ms). Queues
	// under flow control (MaxConcurrency, Rate) always lease first.
	LeaseAfter time.Duration
	// MaxConcurrency caps the handlers of this queue running at once
	// across every worker process (a Redis semaphore whose permits follow
	// the deliveries' leases, so a crashed worker's permits come back when
	// its leases would have expired), at most MaxClusterConcurrency; 0: no
	// cluster-wide cap.
	MaxConcurrency int
	// Rate caps dispatches of this queue across every worker process to
	// Rate per RatePeriod (default 1s, at least 1ms), by the limiter that
	// Limiter names (default TokenBucket: bursts of up to Burst, default
	// 1); 0: no rate limit.
	Rate       int
	RatePeriod time.Duration
	Burst      int
	// Limiter is the algorithm that holds Rate (one of coord's four
	// limiters, keyed by the queue's name, so every worker of the queue
	// must use the same one); "" means TokenBucket. Burst applies to
	// TokenBucket and LeakyBucket; with a window limiter it must be 0 or
	// 1 (the window's Rate is its burst).
	Limiter LimiterKind
}

// LimiterKind names the algorithm of a queue's rate limit
// (QueueOptions.Limiter; config queues.<q>.rate_limit.kind). Each is the
// coord limiter of that name, in Redis, shared by every worker process.
type LimiterKind string

// The limiters a queue can use. Tokens and slots are taken right before
// a handler starts (docs/coordination.md, "Flow control of a queue").
const (
	// TokenBucket (GCRA): Rate per RatePeriod on average, bursts of up
	// to Burst after an idle time.
	TokenBucket LimiterKind = shard.LimiterTokenBucket
	// SlidingWindow: at most Rate starts in any RatePeriod, however the
	// window is placed; no burst beyond that.
	SlidingWindow LimiterKind = shard.LimiterSlidingWindow
	// FixedWindow: at most Rate starts in each RatePeriod window aligned
	// on Redis's clock (window i covers [i·P, (i+1)·P) since the unix
	// epoch); up to 2·Rate around a window boundary. The cheapest.
	FixedWindow LimiterKind = shard.LimiterFixedWindow
	// LeakyBucket: starts spaced evenly, RatePeriod/Rate apart (at least
	// 1µs, rounded up to whole µs); a task admitted ahead of its turn
	// waits for it before its
	// handler starts, and Burst is how many tasks may wait so across the
	// cluster (the bucket's capacity).
	LeakyBucket LimiterKind = shard.LimiterLeakyBucket
)

// LimiterKinds lists the values of LimiterKind, TokenBucket (the
// default) first.
func LimiterKinds() []LimiterKind {
	out := make([]LimiterKind, len(shard.LimiterKinds))
	for i, k := range shard.LimiterKinds {
		out[i] = LimiterKind(k)
	}
	return out
}

// Validate reports every option Handle cannot use, each error a
// *confcheck.FieldError naming the field and wrapping ErrInvalidConfig.
// Zero fields are valid: they mean the default or off, as each field
// says.
func (o QueueOptions) Validate() error {
	p := confcheck.New(ErrInvalidConfig)
	if o.Concurrency != 0 {
		p.IntRange("Concurrency", int64(o.Concurrency), 1, MaxConcurrency)
	}
	if o.Lease != 0 {
		p.DurationRange("Lease", o.Lease, MinLease, 0)
	}
	p.DurationRange("HandlerTimeout", o.HandlerTimeout, 0, 0)
	if err := shard.Backoff(o.Backoff).Validate(); err != nil {
		p.Field("Backoff", "%w", err)
	}
	p.DurationRange("LeaseAfter", o.LeaseAfter, 0, MaxLeaseAfter)
	p.IntRange("MaxConcurrency", int64(o.MaxConcurrency), 0, MaxClusterConcurrency)
	p.IntRange("Rate", int64(o.Rate), 0, MaxRate)
	if o.RatePeriod != 0 {
		p.DurationRange("RatePeriod", o.RatePeriod, MinRatePeriod, 0)
	}
	if o.Burst != 0 {
		p.IntRange("Burst", int64(o.Burst), 1, MaxBurst)
	}
	if field, why := shard.LimiterProblem(string(o.Limiter), o.Rate, o.RatePeriod, o.Burst); field != "" {
		if field == "Kind" { // QueueLimits' name; QueueOptions' is Limiter
			field = "Limiter"
		}
		p.Field(field, "%s", why)
	}
	return p.Err()
}

// withDefaults returns o with the zero fields that mean a default set to
// it, and LeaseAfter LeaseFirst for queues under flow control.
func (o QueueOptions) withDefaults() QueueOptions {
	if o.Concurrency == 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.flowControlled() {
		o.LeaseAfter = LeaseFirst
	}
	if o.Rate > 0 && o.RatePeriod == 0 {
		o.RatePeriod = DefaultRatePeriod
	}
	if o.Rate > 0 && o.Burst == 0 {
		o.Burst = DefaultBurst
	}
	if o.Limiter == "" {
		o.Limiter = TokenBucket
	}
	return o
}

// invalid returns a configuration error wrapping ErrInvalidConfig.
func invalid(format string, args ...any) error {
	return errtext.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
}
