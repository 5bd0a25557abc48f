package client

import (
	"time"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/trace"

	"github.com/hourglass-sched/hourglass"
	"github.com/hourglass-sched/hourglass/codec"
	"github.com/hourglass-sched/hourglass/internal/confcheck"
	"github.com/hourglass-sched/hourglass/internal/errtext"
	"github.com/hourglass-sched/hourglass/internal/shard"
)

// Errors returned by the client, tested with errors.Is. Each is the
// value of the same name in package hourglass, which worker and inspect
// return too: client.ErrNotFound and inspect.ErrNotFound are one value,
// and client.ErrActive is inspect.ErrActive.
var (
	// ErrDuplicate: an enqueue of an id that is still live (scheduled,
	// ready, running or dead); nothing was changed.
	ErrDuplicate = hourglass.ErrDuplicate
	// ErrUnknownQueue: an enqueue to a queue no scheduler registered.
	ErrUnknownQueue = hourglass.ErrUnknownQueue
	// ErrPayloadTooLarge: a payload above this client's or the queue's
	// limit.
	ErrPayloadTooLarge = hourglass.ErrPayloadTooLarge
	// ErrInvalidArgument: a malformed id, queue name, time or option.
	ErrInvalidArgument = hourglass.ErrInvalidArgument
	// ErrNotFound: Cancel, Reschedule, Replace or Lookup of an id that
	// is not stored.
	ErrNotFound = hourglass.ErrNotFound
	// ErrActive: Reschedule or Replace of a task that a worker has taken
	// (it runs, or is about to).
	ErrActive = hourglass.ErrActive
	// ErrDead: Reschedule or Replace of a dead-lettered task.
	ErrDead = hourglass.ErrDead
	// ErrNotFinished: Result of a task that has not ended.
	ErrNotFinished = hourglass.ErrNotFinished
	// ErrNotKept: Wait for a task whose queue keeps no records of its
	// ended tasks.
	ErrNotKept = hourglass.ErrNotKept
	// ErrCancelled is the cause of a running handler's ctx when its task
	// was cancelled (Cancel).
	ErrCancelled = hourglass.ErrCancelled
	// ErrNotReplicated reports an enqueue stored on the primary but not
	// confirmed by Config.WaitReplicas replicas within
	// Config.WaitTimeout: a failover now may lose it. Enqueueing it again
	// with the same id is safe (ErrDuplicate then means it is stored).
	ErrNotReplicated = hourglass.ErrNotReplicated
	// ErrInvalidConfig wraps every error of Config.Validate and New. Such
	// an error also matches ErrInvalidArgument. It is
	// worker.ErrInvalidConfig too.
	ErrInvalidConfig = hourglass.ErrInvalidConfig
)

// Defaults applied by New to zero Config fields, and limits.
const (
	DefaultNamespace  = shard.DefaultNamespace
	DefaultShards     = shard.DefaultShards
	DefaultMaxPayload = shard.DefaultMaxPayload
	// MaxRetriesLimit is the largest per-task retry count accepted.
	MaxRetriesLimit = shard.MaxRetriesLimit
)

// Config configures a Client. Namespace must equal the schedulers'. The
// shard count is read from the layout record in Redis once the count was
// changed (docs/resharding.md), and followed without a restart; Shards
// is the count before any change, and must then equal the schedulers'.
type Config struct {
	// Namespace prefixes every key; default "hourglass".
	Namespace string
	// Shards is the shard count N; default 16.
	Shards int
	// MaxPayload is the largest payload this client sends, in bytes, at
	// most 512 MiB; default 1 MiB. The queue's limit registered by the
	// schedulers is enforced in Redis as well.
	MaxPayload int64
	// RetryFor is how long Enqueue and EnqueueBatch keep sending again,
	// with the same ids, tasks whose call failed with a transient error
	// (connection lost or refused, Redis loading its data after a
	// restart, a failover): such an error leaves the outcome unknown,
	// since the script may have run. 0 means DefaultRetryFor;
	// RetryForNone (any negative value) turns the retries off: the first
	// error is returned. The ctx bounds it too.
	RetryFor time.Duration
	// WaitReplicas, when positive, turns on the durability mode for a
	// primary with replicas (standalone or Sentinel): each enqueue call
	// (and each Reschedule, Replace, change by OnConflict and Debounce or
	// Throttle call that wrote) is followed by WAIT, and reports
	// ErrNotReplicated unless that many replicas confirmed it within
	// WaitTimeout. An acknowledged enqueue then survives a failover to a
	// replica that confirmed it. Not for a Redis Cluster (New refuses
	// it). Default 0: no wait, a failover may lose the enqueues of its
	// replication lag.
	WaitReplicas int
	// WaitTimeout bounds the WAIT; default DefaultWaitTimeout.
	WaitTimeout time.Duration
	// LayoutRefresh is the most time between two reads of the layout
	// record (the shard count, docs/resharding.md) by a client in use, at
	// least 1s; default 1m. A client needs none to store tasks where they
	// belong (a shard redirects a producer on an outdated count), and it
	// reads the record at once when a cancel or lookup does not find an
	// id; the cadence bounds how long it keeps looking in the shards of a
	// change that has ended.
	LayoutRefresh time.Duration
	// Codec encodes the payloads of EnqueueOf and Encode; nil means
	// codec.JSON. The queue's workers must decode with the same codec
	// (worker.TypedWith; worker.Typed is JSON). Task.Payload bytes are
	// sent as they are, whatever the codec.
	Codec codec.Codec
	// TracerProvider, when set, turns tracing on (docs/tracing.md): each
	// Enqueue and EnqueueBatch call is a span ("enqueue <queue>", kind
	// producer) in the trace of its ctx, and each of its tasks carries
	// that span's context to the worker, whose span for the handler is
	// its child. nil (the default) is off, at no cost.
	TracerProvider trace.TracerProvider
	// NoHistory turns off this client's contribution to the queues'
	// minute history (docs/operations.md, "Queue history"): the tasks it
	// enqueues and cancels. By default they are counted in memory and
	// written a few seconds later, one script call for every queue
	// together, nothing per task; Close writes what is left.
	NoHistory bool
	// Logger receives the client's rare warnings (a history that could
	// not be written); nil discards them.
	Logger hclog.Logger
}

// DefaultWaitTimeout is Config.WaitTimeout's default.
const DefaultWaitTimeout = time.Second

// Settings of Config.RetryFor, the client's own retries of an enqueue
// whose call failed with a transient error (not a task's retries, which
// its queue's policy and Task.MaxRetries set, nor worker.NoRetry, which
// dead-letters a task).
const (
	// DefaultRetryFor is Config.RetryFor's default: about one Redis
	// restart with a small data set, or one failover.
	DefaultRetryFor = 5 * time.Second
	// RetryForNone turns the client's retries off: an enqueue returns
	// the first transient error.
	RetryForNone time.Duration = -1
	// NoRetry is RetryForNone.
	//
	// Deprecated: use RetryForNone; NoRetry read as worker.NoRetry, which
	// is about a task's retries.
	NoRetry = -1
)

// Validate reports every field New cannot use, each error wrapping
// ErrInvalidConfig (and ErrInvalidArgument). Zero fields are valid: they
// mean the defaults.
func (c Config) Validate() error {
	p := confcheck.New(ErrInvalidConfig)
	if _, err := shard.NewLayout(shard.LayoutDefaults(c.Namespace, c.Shards)); err != nil {
		p.Addf("%w", err)
	}
	if c.MaxPayload < 0 || c.MaxPayload > shard.MaxPayloadLimit {
		p.Addf("MaxPayload %d not in 1..%d (0: the default)", c.MaxPayload, shard.MaxPayloadLimit)
	}
	if c.WaitReplicas < 0 || c.WaitTimeout < 0 {
		p.Addf("WaitReplicas %d and WaitTimeout %s must not be negative", c.WaitReplicas, c.WaitTimeout)
	}
	if c.WaitTimeout > 0 && c.WaitTimeout < time.Millisecond {
		p.Addf("WaitTimeout %s is below WAIT's resolution of 1ms (0: the default)", c.WaitTimeout)
	}
	if err := (shard.FollowConfig{Refresh: c.LayoutRefresh}).Validate(); err != nil {
		p.Addf("LayoutRefresh %s below %s (0: the default)", c.LayoutRefresh, shard.MinLayoutRefresh)
	}
	return p.Err()
}

// withDefaults returns c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	c.Namespace, c.Shards = shard.LayoutDefaults(c.Namespace, c.Shards)
	if c.MaxPayload == 0 {
		c.MaxPayload = DefaultMaxPayload
	}
	if c.WaitReplicas > 0 && c.WaitTimeout == 0 {
		c.WaitTimeout = DefaultWaitTimeout
	}
	if c.Codec == nil {
		c.Codec = codec.JSON{}
	}
	switch {
	case c.RetryFor == 0:
		c.RetryFor = DefaultRetryFor
	case c.RetryFor < 0:
		c.RetryFor = 0
	}
	return c
}

func invalidConfig(format string, args ...any) error {
	return errtext.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
}

// Priority is a task's level: hourglass.Priority.
type Priority = hourglass.Priority

// The levels of Task.Priority and SetPriority.
const (
	PriorityHigh   = hourglass.PriorityHigh
	PriorityNormal = hourglass.PriorityNormal
	PriorityLow    = hourglass.PriorityLow
)
