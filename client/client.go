package client

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass"
	"github.com/hourglass-sched/hourglass/codec"
	"github.com/hourglass-sched/hourglass/internal/confcheck"
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
	// ErrNotFound: Cancel or Lookup of an id that is not stored.
	ErrNotFound = hourglass.ErrNotFound
	// ErrActive: Cancel of a task that is running.
	ErrActive = hourglass.ErrActive
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
	// since the script may have run. Default DefaultRetryFor; NoRetry
	// (any negative value) returns the first error. The ctx bounds it too.
	RetryFor time.Duration
	// WaitReplicas, when positive, turns on the durability mode for a
	// primary with replicas (standalone or Sentinel): each enqueue call
	// is followed by WAIT on its connection, and reports
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
}

// DefaultWaitTimeout is Config.WaitTimeout's default.
const DefaultWaitTimeout = time.Second

// Retry settings.
const (
	// DefaultRetryFor is Config.RetryFor's default: about one Redis
	// restart with a small data set, or one failover.
	DefaultRetryFor = 5 * time.Second
	// NoRetry turns the client's retries off (Config.RetryFor).
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
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
}

// Client enqueues, cancels and looks up tasks. It is safe for concurrent
// use and does not own the Redis client it was given.
type Client struct {
	store      *shard.Store
	layout     *shard.Follower
	maxPayload int64
	retryFor   time.Duration // 0: no retry
	codec      codec.Codec
}

// New returns a Client on rdb.
func New(rdb redis.UniversalClient, cfg Config) (*Client, error) {
	if rdb == nil {
		return nil, invalidConfig("nil redis client")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	l, err := shard.NewLayout(cfg.Namespace, cfg.Shards)
	if err != nil {
		return nil, invalidConfig("%w", err)
	}
	if _, ok := rdb.(*redis.ClusterClient); ok && cfg.WaitReplicas > 0 {
		return nil, invalidConfig("WaitReplicas needs a single primary; a Redis Cluster replicates per node")
	}
	if c, ok := rdb.(*redis.Client); ok && cfg.WaitReplicas > 0 {
		// go-redis resends a command whose reply it did not read in
		// time: a WAIT as long as the read timeout would be cut short.
		if rt := c.Options().ReadTimeout; rt > 0 && cfg.WaitTimeout >= rt {
			return nil, invalidConfig("WaitTimeout %s must be below the Redis client's read timeout %s", cfg.WaitTimeout, rt)
		}
	}
	store := shard.NewStore(rdb, l).WithDurability(shard.Durability{Replicas: cfg.WaitReplicas, Timeout: cfg.WaitTimeout})
	follow, err := store.Follow(shard.FollowConfig{Refresh: cfg.LayoutRefresh})
	if err != nil {
		return nil, invalidConfig("%w", err)
	}
	return &Client{store: store, layout: follow, maxPayload: cfg.MaxPayload, retryFor: cfg.RetryFor, codec: cfg.Codec}, nil
}

// Task describes one task to enqueue.
type Task struct {
	// ID identifies the task; it must be 1..256 bytes of UTF-8 without
	// "|" and without control characters (shard.IDRule: CR, LF, NUL, ESC
	// and the like are refused, as enqueue.lua refuses them). Empty
	// means a random 16-character id. While a task with the same ID is
	// live (scheduled, ready, running or dead-lettered) a second enqueue
	// does nothing and reports ErrDuplicate.
	ID string
	// Queue names the queue; it must be registered by the schedulers.
	Queue string
	// Payload is handed to the handler unchanged.
	Payload []byte
	// At is the absolute due time (millisecond precision). When zero,
	// the task is due Delay after Redis's current time.
	At time.Time
	// Delay is used when At is zero; 0 means due now.
	Delay time.Duration
	// MaxRetries overrides the queue's retry limit when non-nil; see
	// Retries.
	MaxRetries *int
	// Timeout overrides the queue's handler timeout when non-zero; it is
	// also the delivery's lease. Millisecond precision.
	Timeout time.Duration
}

// Retries returns a pointer to n, for Task.MaxRetries.
func Retries(n int) *int { return &n }

// Result is the outcome of enqueueing one task.
type Result struct {
	// ID is the task's id (generated when the Task had none).
	ID string
	// Due is when the task is due. For a duplicate it is the live task's
	// due time if it is still scheduled, else zero.
	Due time.Time
	// Err is nil or the reason this task was not enqueued (or, wrapping
	// ErrNotReplicated, was stored but not confirmed by replicas).
	Err error
}

// Enqueue schedules one task. On ErrDuplicate the returned Result
// describes the live task, which is left unchanged.
//
// A transient error (connection lost, Redis restarting or failing over)
// leaves the outcome unknown: the task may have been stored. The client
// retries such errors itself for Config.RetryFor, with the same id; an
// error that remains after that is still of unknown outcome, and calling
// again with the same Task.ID (set one if you let the client generate
// it: Result.ID) is safe: ErrDuplicate then means the task is stored.
func (c *Client) Enqueue(ctx context.Context, t Task) (Result, error) {
	rs, _ := c.EnqueueBatch(ctx, []Task{t})
	return rs[0], rs[0].Err
}

// BatchError reports how many tasks of a batch failed; each Result
// carries its own error.
type BatchError struct {
	Failed, Total int
	// First is the first failure, for a quick look.
	First error
}

// Error summarises the failures.
func (e *BatchError) Error() string {
	return fmt.Sprintf("client: %d of %d tasks failed (not enqueued, or with ErrNotReplicated stored but not confirmed); first: %v", e.Failed, e.Total, e.First)
}

// Unwrap returns the first failure so errors.Is works on a batch of one.
func (e *BatchError) Unwrap() error { return e.First }

// EnqueueBatch schedules tasks in one pipelined round trip. Results are
// in the order of tasks. The error is nil when every task was enqueued,
// otherwise a *BatchError; invalid tasks are rejected without being
// sent while the valid ones still go.
func (c *Client) EnqueueBatch(ctx context.Context, tasks []Task) ([]Result, error) {
	c.layout.Layout(ctx) // at most every LayoutRefresh
	out := make([]Result, len(tasks))
	args := make([]shard.EnqueueArgs, 0, len(tasks))
	generated := make([]bool, 0, len(tasks))
	idx := make([]int, 0, len(tasks))
	for i, t := range tasks {
		a, err := c.toArgs(t)
		out[i].ID = a.ID
		if err != nil {
			out[i].Err = err
			continue
		}
		args = append(args, a)
		generated = append(generated, t.ID == "")
		idx = append(idx, i)
	}
	if len(args) > 0 {
		for j, r := range c.enqueueRetrying(ctx, args, generated) {
			out[idx[j]].Due, out[idx[j]].Err = r.Due, r.Err
		}
		c.explainUnknownQueues(ctx, tasks, out)
	}
	var be *BatchError
	for _, r := range out {
		if r.Err != nil {
			if be == nil {
				be = &BatchError{Total: len(tasks), First: r.Err}
			}
			be.Failed++
		}
	}
	if be != nil {
		return out, be
	}
	return out, nil
}

// explainUnknownQueues adds to each ErrUnknownQueue why the queue is
// unknown, when the registrations say more: registered in some shards
// only (this client's Shards differ from the schedulers'), or in no shard
// of this namespace. It costs a round trip per unknown queue, on the
// error path only.
func (c *Client) explainUnknownQueues(ctx context.Context, tasks []Task, out []Result) {
	why := map[string]string{}
	for i := range out {
		if !errors.Is(out[i].Err, ErrUnknownQueue) {
			continue
		}
		q := tasks[i].Queue
		w, ok := why[q]
		if !ok {
			if reg, err := c.store.Registration(ctx, []string{q}); err == nil {
				l := c.store.Layout()
				w = reg.Problem(q, l.Namespace(), l.Shards())
			}
			why[q] = w
		}
		if w != "" {
			out[i].Err = fmt.Errorf("%w (%s)", out[i].Err, w)
		}
	}
}

func (c *Client) toArgs(t Task) (shard.EnqueueArgs, error) {
	a := shard.EnqueueArgs{ID: t.ID, Queue: t.Queue, Payload: t.Payload, Due: t.At, Delay: t.Delay, MaxRetries: -1, Timeout: t.Timeout}
	if a.ID == "" {
		a.ID = newID()
	}
	switch {
	case !shard.ValidID(a.ID):
		return a, fmt.Errorf("client: %w: task id %q must be %s", ErrInvalidArgument, truncate(a.ID), shard.IDRule)
	case !shard.ValidQueue(t.Queue):
		return a, fmt.Errorf("client: %w: queue name %q must match %s", ErrInvalidArgument, truncate(t.Queue), shard.QueueRule)
	case int64(len(t.Payload)) > c.maxPayload:
		return a, fmt.Errorf("client: %w: %d bytes > %d", ErrPayloadTooLarge, len(t.Payload), c.maxPayload)
	case t.Delay < 0:
		return a, fmt.Errorf("client: %w: negative delay %s", ErrInvalidArgument, t.Delay)
	case !t.At.IsZero() && t.At.UnixMilli() <= 0:
		return a, fmt.Errorf("client: %w: due time %s before 1970", ErrInvalidArgument, t.At)
	case t.Timeout < 0 || (t.Timeout > 0 && t.Timeout < time.Millisecond):
		return a, fmt.Errorf("client: %w: timeout %s must be 0 (queue default) or at least 1ms", ErrInvalidArgument, t.Timeout)
	}
	if t.MaxRetries != nil {
		if *t.MaxRetries < 0 || *t.MaxRetries > MaxRetriesLimit {
			return a, fmt.Errorf("client: %w: max retries %d not in 0..%d", ErrInvalidArgument, *t.MaxRetries, MaxRetriesLimit)
		}
		a.MaxRetries = *t.MaxRetries
	}
	return a, nil
}

// Cancel deletes a task that has not started running: scheduled, ready or
// dead-lettered. It returns ErrNotFound for an unknown id and ErrActive
// for a task whose handler is running.
func (c *Client) Cancel(ctx context.Context, id string) error {
	if !shard.ValidStoredID(id) {
		return fmt.Errorf("client: %w: task id %q", ErrInvalidArgument, truncate(id))
	}
	c.layout.Layout(ctx)
	_, err := c.store.Cancel(ctx, id)
	return err
}

// State is where a task is in its life.
type State string

// Task states reported by Lookup.
const (
	StateScheduled State = "scheduled" // waiting for its due time
	StateReady     State = "ready"     // due, waiting for a worker
	StateActive    State = "active"    // handed to a worker: running, leased or not yet
	StateDead      State = "dead"      // in the dead-letter queue
)

// Info is a task as Lookup sees it.
type Info struct {
	ID         string
	State      State
	Queue      string
	Payload    []byte
	Attempts   int
	MaxRetries int
	Timeout    time.Duration
	// Due is the time the task is (or was last) due.
	Due time.Time
	// Enqueued is when the task was stored.
	Enqueued time.Time
	// LeaseUntil is the lease deadline of an active task; zero while a
	// worker runs it before taking a lease (see worker.QueueOptions.LeaseAfter).
	LeaseUntil time.Time
	// DeadReason is the JSON burial record of a dead task.
	DeadReason string
	// Corrupt is set when the stored data could not be decoded.
	Corrupt error
}

// Lookup returns a task's current state, or ErrNotFound. Tasks that
// finished are deleted and are not found.
func (c *Client) Lookup(ctx context.Context, id string) (Info, error) {
	if !shard.ValidStoredID(id) {
		return Info{}, fmt.Errorf("client: %w: task id %q", ErrInvalidArgument, truncate(id))
	}
	c.layout.Layout(ctx)
	in, err := c.store.Lookup(ctx, id)
	if err != nil {
		return Info{}, err
	}
	info := Info{
		ID: id, State: State(in.State), Queue: in.Task.Queue, Payload: in.Task.Payload,
		Attempts: in.Task.Attempts, MaxRetries: in.Task.MaxRetries, Timeout: in.Task.Timeout,
		Due: in.Task.Due, Enqueued: in.Task.Enqueued, DeadReason: in.DeadInfo, Corrupt: in.DecodeErr,
	}
	if info.State == StateActive {
		info.LeaseUntil = in.At
	}
	return info, nil
}

// Exists reports whether a task with id is stored, in any state
// (scheduled, ready, running or dead-lettered). Tasks that finished are
// deleted and do not exist. One round trip (two while a change of the
// shard count moves the id).
func (c *Client) Exists(ctx context.Context, id string) (bool, error) {
	if !shard.ValidStoredID(id) {
		return false, fmt.Errorf("client: %w: task id %q", ErrInvalidArgument, truncate(id))
	}
	c.layout.Layout(ctx)
	return c.store.Exists(ctx, id)
}

func newID() string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(errors.New("client: crypto/rand failed: " + err.Error())) // never fails on Linux
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
