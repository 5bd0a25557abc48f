package worker

import (
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hourglass-sched/hourglass/internal/confcheck"
	"github.com/hourglass-sched/hourglass/internal/shard"
)

// Defaults for zero Config and QueueOptions fields, the limits Validate
// enforces, and the sentinels that mean "none". Each is stated once, here;
// the worker binary's configuration (internal/config) refers to them.
const (
	DefaultNamespace = shard.DefaultNamespace
	DefaultShards    = shard.DefaultShards

	// DefaultShutdownGrace is Config.ShutdownGrace when unset. NoGrace as
	// Config.ShutdownGrace releases running tasks at shutdown without
	// waiting for their handlers.
	DefaultShutdownGrace               = 30 * time.Second
	NoGrace              time.Duration = -1

	// DefaultFetchTimeout is Config.FetchTimeout when unset; it must be a
	// whole number of seconds from MinFetchTimeout to MaxFetchTimeout
	// (Redis's BLMPOP takes whole seconds as go-redis sends it).
	DefaultFetchTimeout = 2 * time.Second
	MinFetchTimeout     = time.Second
	MaxFetchTimeout     = time.Minute

	// DefaultAckLinger is Config.AckLinger when unset: at a steady 2,000
	// tasks/s it cuts Redis's round trips per task by about a fifth. It is
	// at most MaxAckLinger (see internal/shard's timing.go); NoAckLinger
	// sends acknowledgements without waiting for others.
	DefaultAckLinger               = 2 * time.Millisecond
	MaxAckLinger                   = shard.MaxAckLinger
	NoAckLinger      time.Duration = -1

	// DefaultConcurrency is QueueOptions.Concurrency when unset, at most
	// MaxConcurrency.
	DefaultConcurrency = 10
	MaxConcurrency     = 10000

	// DefaultHandlerTimeout bounds a handler run when QueueOptions sets
	// none, so that a hung handler (a partner that never answers) frees
	// its slot and its task within a minute instead of holding them; a
	// handler that needs longer sets HandlerTimeout, or NoTimeout to run
	// without a bound. The worker binary's queues.<name>.handler_timeout
	// defaults to the same minute.
	DefaultHandlerTimeout               = time.Minute
	NoTimeout             time.Duration = -1

	// DefaultLeaseAfter is QueueOptions.LeaseAfter when unset, at most
	// MaxLeaseAfter (see internal/shard's timing.go); LeaseFirst leases
	// every task before its handler starts.
	DefaultLeaseAfter               = 100 * time.Millisecond
	MaxLeaseAfter                   = shard.MaxLeaseAfter
	LeaseFirst        time.Duration = -1

	// MinLease is the shortest QueueOptions.Lease.
	MinLease = 10 * time.Millisecond

	// MaxClusterConcurrency bounds QueueOptions.MaxConcurrency.
	MaxClusterConcurrency = 100000
	// MaxRate and MaxBurst bound QueueOptions.Rate and Burst;
	// DefaultRatePeriod and DefaultBurst apply when Rate is set and they
	// are not; RatePeriod is at least MinRatePeriod.
	MaxRate           = 1000000
	MaxBurst          = 1000000
	DefaultRatePeriod = time.Second
	MinRatePeriod     = time.Millisecond
	DefaultBurst      = 1
)

// Config configures a Worker. Namespace and Shards must equal the
// schedulers'.
type Config struct {
	Namespace string
	Shards    int
	// ShutdownGrace is how long running handlers may finish after Run's
	// ctx ends; 0 means DefaultShutdownGrace, NoGrace (any negative value)
	// releases running tasks at once.
	ShutdownGrace time.Duration
	// FetchTimeout bounds one blocking fetch, in whole seconds from
	// MinFetchTimeout to MaxFetchTimeout; 0 means DefaultFetchTimeout. An
	// idle worker sends one command per FetchTimeout.
	FetchTimeout time.Duration
	// AckLinger is how long a successful delivery's acknowledgement may
	// wait for others to share its round trip to Redis, at most
	// MaxAckLinger; 0 means DefaultAckLinger, NoAckLinger (any negative
	// value) sends each batch at once. The handler's slot is free
	// meanwhile; an ack that still holds a slot or a flow-control permit
	// never waits.
	AckLinger time.Duration
	// LayoutRefresh is how often the worker re-reads the layout record
	// (the shard count, docs/resharding.md) besides the announcements it
	// hears on the control channel, at least 1s; 0 means 1m.
	LayoutRefresh time.Duration
	// Logger receives the worker's logs; default: discard.
	Logger hclog.Logger
	// Registerer receives the worker's metrics; nil: not registered.
	Registerer prometheus.Registerer
}

// Validate reports every field New cannot use, each error wrapping
// ErrInvalidConfig. Zero fields are valid: they mean the defaults.
func (c Config) Validate() error {
	p := confcheck.New(ErrInvalidConfig)
	if _, err := shard.NewLayout(shard.LayoutDefaults(c.Namespace, c.Shards)); err != nil {
		p.Addf("%w", err)
	}
	if ft := c.FetchTimeout; ft != 0 && (ft < MinFetchTimeout || ft > MaxFetchTimeout || ft%time.Second != 0) {
		p.Addf("FetchTimeout %s: want whole seconds from %s to %s", ft, MinFetchTimeout, MaxFetchTimeout)
	}
	if c.AckLinger > MaxAckLinger {
		p.Addf("AckLinger %s above %s", c.AckLinger, MaxAckLinger)
	}
	if err := (shard.FollowConfig{Refresh: c.LayoutRefresh}).Validate(); err != nil {
		p.Addf("LayoutRefresh %s below %s (0: the default)", c.LayoutRefresh, shard.MinLayoutRefresh)
	}
	return p.Err()
}

// withDefaults returns c with zero fields set to their defaults and the
// "none" sentinels to what the worker runs with (0: no grace, no linger).
func (c Config) withDefaults() Config {
	c.Namespace, c.Shards = shard.LayoutDefaults(c.Namespace, c.Shards)
	c.ShutdownGrace = orNone(c.ShutdownGrace, DefaultShutdownGrace) // NoGrace: release at once
	if c.FetchTimeout == 0 {
		c.FetchTimeout = DefaultFetchTimeout
	}
	c.AckLinger = orNone(c.AckLinger, DefaultAckLinger) // NoAckLinger: send at once
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return c
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
	Concurrency int
	// Lease overrides the visibility timeout, at least MinLease; 0 uses
	// each task's timeout (set at enqueue, default: the queue's).
	Lease time.Duration
	// HandlerTimeout bounds one handler run (its ctx deadline); 0 means
	// DefaultHandlerTimeout, NoTimeout (negative) means none. A timed-out
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
	// long, may see the task run again, as after an expired lease. 0 means
	// DefaultLeaseAfter (100ms); LeaseFirst (any negative value) leases
	// every task before its handler starts; at most MaxLeaseAfter. Queues
	// under flow control (MaxConcurrency, Rate) always lease first.
	LeaseAfter time.Duration
	// MaxConcurrency caps the handlers of this queue running at once
	// across every worker process (a Redis semaphore whose permits follow
	// the deliveries' leases, so a crashed worker's permits come back when
	// its leases would have expired), at most MaxClusterConcurrency; 0: no
	// cluster-wide cap.
	MaxConcurrency int
	// Rate caps dispatches of this queue across every worker process to
	// Rate per RatePeriod (default 1s, at least 1ms), with bursts of up to
	// Burst (default 1), on a GCRA token bucket; 0: no rate limit.
	Rate       int
	RatePeriod time.Duration
	Burst      int
}

// Validate reports every option Handle cannot use, each error wrapping
// ErrInvalidConfig. Zero fields are valid: they mean the defaults.
func (o QueueOptions) Validate() error {
	p := confcheck.New(ErrInvalidConfig)
	bad := p.Addf
	if o.Concurrency < 0 || o.Concurrency > MaxConcurrency {
		bad("Concurrency %d not in 1..%d (0: the default)", o.Concurrency, MaxConcurrency)
	}
	if o.Lease < 0 || (o.Lease > 0 && o.Lease < MinLease) {
		bad("Lease %s below %s", o.Lease, MinLease)
	}
	if err := shard.Backoff(o.Backoff).Validate(); err != nil {
		bad("Backoff: %v", err)
	}
	if o.LeaseAfter > MaxLeaseAfter {
		bad("LeaseAfter %s above %s", o.LeaseAfter, MaxLeaseAfter)
	}
	if o.MaxConcurrency < 0 || o.MaxConcurrency > MaxClusterConcurrency {
		bad("MaxConcurrency %d not in 0..%d", o.MaxConcurrency, MaxClusterConcurrency)
	}
	if o.Rate < 0 || o.Rate > MaxRate {
		bad("Rate %d not in 0..%d", o.Rate, MaxRate)
	}
	if o.RatePeriod < 0 || (o.RatePeriod > 0 && o.RatePeriod < MinRatePeriod) {
		bad("RatePeriod %s below %s", o.RatePeriod, MinRatePeriod)
	}
	if o.Burst < 0 || o.Burst > MaxBurst {
		bad("Burst %d not in 0..%d", o.Burst, MaxBurst)
	}
	return p.Err()
}

// withDefaults returns o with zero fields set to their defaults and the
// "none" sentinels to what the worker runs with: HandlerTimeout 0 is no
// bound, LeaseAfter LeaseFirst for queues under flow control.
func (o QueueOptions) withDefaults() QueueOptions {
	if o.Concurrency == 0 {
		o.Concurrency = DefaultConcurrency
	}
	o.HandlerTimeout = orNone(o.HandlerTimeout, DefaultHandlerTimeout) // NoTimeout: no bound
	if o.LeaseAfter == 0 {
		o.LeaseAfter = DefaultLeaseAfter
	}
	if o.LeaseAfter < 0 || o.flowControlled() {
		o.LeaseAfter = LeaseFirst
	}
	if o.Rate > 0 && o.RatePeriod == 0 {
		o.RatePeriod = DefaultRatePeriod
	}
	if o.Rate > 0 && o.Burst == 0 {
		o.Burst = DefaultBurst
	}
	return o
}

// flowControlled reports whether the queue has a cluster-wide limit.
func (o QueueOptions) flowControlled() bool { return o.MaxConcurrency > 0 || o.Rate > 0 }

// orNone maps a duration option to what the worker runs with: 0 (unset)
// is def, a negative sentinel (NoGrace, NoAckLinger, NoTimeout) is 0.
func orNone(d, def time.Duration) time.Duration {
	switch {
	case d == 0:
		return def
	case d < 0:
		return 0
	}
	return d
}

// invalid returns a configuration error wrapping ErrInvalidConfig.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
}
