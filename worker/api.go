package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hourglass-sched/hourglass/internal/shard"
)

// Errors reported by the worker.
var (
	// ErrLeaseLost is the cause of a handler ctx's cancellation when the
	// delivery's lease could not be kept.
	ErrLeaseLost = errors.New("worker: lease lost")
	// ErrStaleToken is returned by a manual Ack or Nack whose delivery is
	// no longer current.
	ErrStaleToken = shard.ErrStaleToken
	// ErrInvalidConfig wraps configuration errors.
	ErrInvalidConfig = errors.New("worker: invalid config")
	// ErrShuttingDown is the cause of a handler ctx's cancellation when
	// the shutdown grace period ran out; the task is released.
	ErrShuttingDown = errors.New("worker: shutting down")
)

// Defaults for zero Config and QueueOptions fields.
const (
	DefaultNamespace     = shard.DefaultNamespace
	DefaultShards        = shard.DefaultShards
	DefaultShutdownGrace = 30 * time.Second
	DefaultFetchTimeout  = 2 * time.Second
	DefaultConcurrency   = 10
	// DefaultAckLinger is Config.AckLinger when unset: at a steady 2,000
	// tasks/s it cuts Redis's round trips per task by about a fifth.
	DefaultAckLinger = 2 * time.Millisecond
	// MaxAckLinger bounds Config.AckLinger, far within
	// shard.UnleasedGrace (1 s), the least time recovery leaves a task
	// run before its lease with its worker.
	MaxAckLinger = 50 * time.Millisecond
	// NoAckLinger as Config.AckLinger sends acknowledgements without
	// waiting for others.
	NoAckLinger time.Duration = -1
	// DefaultHandlerTimeout bounds a handler run when QueueOptions sets
	// none, so that a hung handler cannot hold its task forever.
	DefaultHandlerTimeout = 30 * time.Minute
	// NoTimeout as QueueOptions.HandlerTimeout lets handlers run (and
	// hold their leases) without a bound.
	NoTimeout time.Duration = -1
	// NoGrace as Config.ShutdownGrace releases running tasks at shutdown
	// without waiting for their handlers.
	NoGrace time.Duration = -1
	// DefaultLeaseAfter is QueueOptions.LeaseAfter when unset.
	DefaultLeaseAfter = 100 * time.Millisecond
	// MaxLeaseAfter bounds QueueOptions.LeaseAfter: well within
	// shard.UnleasedGrace (1 s), the least time recovery leaves a popped,
	// unleased task with its worker.
	MaxLeaseAfter = 500 * time.Millisecond
	// LeaseFirst as QueueOptions.LeaseAfter leases every task before its
	// handler starts.
	LeaseFirst time.Duration = -1
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
	// FetchTimeout bounds one blocking fetch (whole seconds; Redis's
	// BLMPOP). An idle worker sends one command per FetchTimeout.
	FetchTimeout time.Duration
	// AckLinger is how long a successful delivery's acknowledgement may
	// wait for others to share its round trip to Redis, at most
	// MaxAckLinger; 0 means DefaultAckLinger, NoAckLinger (any negative
	// value) sends each batch at once. The handler's slot is free
	// meanwhile; an ack that still holds a slot or a flow-control permit
	// never waits.
	AckLinger time.Duration
	// Logger receives the worker's logs; default: discard.
	Logger hclog.Logger
	// Registerer receives the worker's metrics; nil: not registered.
	Registerer prometheus.Registerer
}

// Backoff is an exponential retry delay: failed attempt n waits
// min(Cap, Base*Factor^(n-1)), half fixed and half random.
type Backoff struct {
	Base, Cap time.Duration
	Factor    float64
}

// QueueOptions tune how one queue is consumed.
type QueueOptions struct {
	// Concurrency is the most handlers of this queue running at once in
	// this process; default 10.
	Concurrency int
	// Lease overrides the visibility timeout; 0 uses each task's timeout
	// (set at enqueue, default: the queue's).
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
	// attempt) no sooner than shard.UnleasedGrace (1 s) after the pop: a
	// worker that stalls that long, or whose ack cannot reach Redis for
	// that long, may see the task run again, as after an expired lease. 0 means
	// DefaultLeaseAfter (100ms); LeaseFirst (any negative value) leases
	// every task before its handler starts; at most MaxLeaseAfter. Queues
	// under flow control (MaxConcurrency, Rate) always lease first.
	LeaseAfter time.Duration
	// MaxConcurrency caps the handlers of this queue running at once
	// across every worker process (a Redis semaphore whose permits follow
	// the deliveries' leases, so a crashed worker's permits come back when
	// its leases would have expired); 0: no cluster-wide cap.
	MaxConcurrency int
	// Rate caps dispatches of this queue across every worker process to
	// Rate per RatePeriod (default 1s), with bursts of up to Burst
	// (default 1), on a GCRA token bucket; 0: no rate limit.
	Rate       int
	RatePeriod time.Duration
	Burst      int
}

// flowControlled reports whether the queue has a cluster-wide limit.
func (o QueueOptions) flowControlled() bool { return o.MaxConcurrency > 0 || o.Rate > 0 }

// Handler runs one task. See the package documentation for how its
// result is used.
type Handler func(ctx context.Context, t *Task) error

// Task is one delivery of a task to a handler.
type Task struct {
	ID    string
	Queue string
	// Payload is the task's payload, unchanged.
	Payload []byte
	// Attempt is 1 for the first delivery, 2 for the first retry, ...
	Attempt    int
	MaxRetries int
	// Due is when the task was due (Redis time); Enqueued when stored.
	Due, Enqueued time.Time

	d *delivery // the worker's side of the delivery
}

// Ack completes a manual-ack delivery. It returns ErrStaleToken if the
// lease was lost meanwhile.
func (t *Task) Ack(ctx context.Context) error { return t.d.finish(ctx, nil) }

// Nack fails a manual-ack delivery with err (NoRetry and RetryAfter
// apply).
func (t *Task) Nack(ctx context.Context, err error) error {
	if err == nil {
		err = errors.New("nack without error")
	}
	return t.d.finish(ctx, err)
}

// noRetryError marks an error that must not be retried.
type noRetryError struct{ err error }

func (e noRetryError) Error() string { return "not retryable: " + e.err.Error() }
func (e noRetryError) Unwrap() error { return e.err }

// NoRetry wraps err so that the task goes to the dead-letter queue
// without further attempts.
func NoRetry(err error) error {
	if err == nil {
		err = errors.New("no retry requested")
	}
	return noRetryError{err}
}

// retryAfterError asks for a retry after a given delay.
type retryAfterError struct {
	d   time.Duration
	err error
}

func (e retryAfterError) Error() string {
	return fmt.Sprintf("retry after %s: %v", e.d, e.err)
}
func (e retryAfterError) Unwrap() error { return e.err }

// RetryAfter wraps err so that the task is retried after d instead of the
// backoff delay (still counting an attempt against its max retries).
func RetryAfter(d time.Duration, err error) error {
	if err == nil {
		err = errors.New("retry requested")
	}
	return retryAfterError{d: d, err: err}
}
