package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/hourglass-sched/hourglass"
	"github.com/hourglass-sched/hourglass/codec"
	"github.com/hourglass-sched/hourglass/internal/errtext"
	"github.com/hourglass-sched/hourglass/internal/fanout"
	"github.com/hourglass-sched/hourglass/internal/groupcommit"
	"github.com/hourglass-sched/hourglass/internal/history"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/tracectx"
	"github.com/hourglass-sched/hourglass/internal/version"
)

// Client enqueues, cancels and looks up tasks. It is safe for concurrent
// use and does not own the Redis client it was given.
type Client struct {
	store      *shard.Store
	layout     *shard.Follower
	maxPayload int64
	retryFor   time.Duration // 0: no retry
	codec      codec.Codec
	// small combines concurrent calls of up to combineMax tasks (Enqueue,
	// and small EnqueueBatch calls) into one EnqueueBatch when they
	// overlap (internal/groupcommit).
	small *groupcommit.Combiner[[]shard.EnqueueArgs, []shard.EnqueueResult]
	// hub carries the Waits' subscriptions: one pub/sub connection,
	// open while some Wait runs (internal/fanout).
	hub *fanout.Hub
	// runs generates the ids of tasks enqueued without one, a run of
	// them in one shard at a time (shard.Runs).
	runs shard.Runs
	// tracer makes the enqueue spans; nil when tracing is off
	// (Config.TracerProvider).
	tracer trace.Tracer
	// hist counts the tasks enqueued and cancelled per queue and minute
	// (internal/history); nil with Config.NoHistory.
	hist *history.Recorder
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
	c := &Client{store: store, layout: follow, maxPayload: cfg.MaxPayload, retryFor: cfg.RetryFor, codec: cfg.Codec,
		small: groupcommit.New(enqueueMerged(store)), hub: fanout.New(rdb, fanout.Classic, nil)}
	if cfg.TracerProvider != nil {
		c.tracer = cfg.TracerProvider.Tracer(tracectx.Instrumentation, trace.WithInstrumentationVersion(version.Short()))
	}
	if !cfg.NoHistory {
		c.hist = history.NewRecorder(store, cfg.Logger)
	}
	return c, nil
}

// Close writes the counts of the queue history that this client still
// holds (the tasks it enqueued and cancelled in the last few seconds) and
// stops its timer. It does not close the Redis client, and the Client
// stays usable: what it counts afterwards is written by the next Close.
// A client never closed loses at most those last seconds' counts.
func (c *Client) Close(ctx context.Context) error {
	return c.hist.Close(ctx)
}

// Task describes one task to enqueue.
type Task struct {
	// ID identifies the task; it must be 1..256 bytes of UTF-8 without
	// "|" and without control characters (shard.IDRule: CR, LF, NUL, ESC
	// and the like are refused, as enqueue.lua refuses them). Empty
	// means a random 16-character id, chosen so that the client's
	// generated ids go to one shard in runs of 64, one shard after the
	// other (shard.Runs, for 2 to 256 shards): tasks enqueued together
	// then share their script calls in Redis at every step, which is
	// what makes a steady stream cheap on many shards (not for a task
	// with a Key: its id is placed by the whole "{Key}..." string). While a task with
	// the same ID is live (scheduled, ready, running or dead-lettered) a
	// second enqueue does nothing and reports ErrDuplicate.
	ID string
	// Key, when set, is the task's key within its queue: a tenant, a
	// customer, a partner. A fair queue (queues.<q>.fair) takes its due
	// tasks in turns between their keys, so that one key's backlog does
	// not hold the others behind it (docs/fairness.md). The key travels
	// in the id as its hash tag: the task's id is "{" + Key + "}" + ID
	// (+ a generated id when ID is empty), which Result.ID returns and
	// by which the task is then looked up, cancelled or changed; an ID
	// that already starts with a hash tag has that tag as its key
	// without Key. A key is shard.KeyRule: 1..128 bytes of UTF-8
	// without "{", "}", "|" and control characters. Empty: no key (a fair
	// queue gives keyless tasks the turns of one key, "").
	Key string
	// Queue names the queue; it must be registered by the schedulers.
	Queue string
	// Payload is handed to the handler unchanged.
	Payload []byte
	// At is the absolute due time (millisecond precision). When zero,
	// the task is due Delay after Redis's current time.
	At time.Time
	// Delay is used when At is zero; 0 means due now.
	Delay time.Duration
	// MaxRetries is the task's retry limit, 0..MaxRetriesLimit (0:
	// never retried); nil means the queue's. Retries makes the pointer.
	MaxRetries *int
	// Timeout is the task's handler timeout, which is also the
	// delivery's lease, at least 1ms, millisecond precision; 0 means the
	// queue's.
	Timeout time.Duration
	// Priority is the task's level: PriorityHigh, PriorityNormal (the
	// zero value) or PriorityLow. A fair queue takes each key's tasks of
	// the three levels in the shares 16 : 4 : 1 while they wait
	// (docs/fairness.md, "Priorities"); SetPriority changes it later.
	Priority Priority
	// OnConflict is what the enqueue does when a task with the same ID is
	// live: ConflictIgnore (the zero value) reports ErrDuplicate and
	// changes nothing; the other rules change the live task if it is
	// still pending (Result.Changed), atomically in Redis, and enqueue
	// this task if the live one finished meanwhile. Only the payload and
	// the due time change (not the queue, retries, timeout or priority:
	// SetPriority changes that).
	OnConflict Conflict
	// UniqueFor, above zero (at least 1ms), keeps the id reserved that
	// long from this enqueue: until then another enqueue of the id with
	// UniqueFor set reports ErrDuplicate even after this task finished
	// (its message says "reserved" when no task of the id is live). 0:
	// the id is free again the moment its task finishes. An enqueue
	// without UniqueFor does not look at reservations.
	UniqueFor time.Duration
}

// Retries returns a pointer to n, for Task.MaxRetries: hourglass.Retries.
func Retries(n int) *int { return hourglass.Retries(n) }

// Result is the outcome of enqueueing one task.
type Result struct {
	// ID is the task's id (generated when the Task had none; empty for
	// such a task that the client's checks refused).
	ID string
	// Due is when the task is due. For a duplicate it is the live task's
	// due time if it is still scheduled, else zero.
	Due time.Time
	// Err is nil or the reason this task was not enqueued (or, wrapping
	// ErrNotReplicated, was stored but not confirmed by replicas).
	Err error
	// Changed reports that the task's OnConflict rule changed the live
	// task of this ID instead of storing a new one; Due is then the live
	// task's due time after the change.
	Changed bool
}

// Enqueue schedules one task. On ErrDuplicate the returned Result
// describes the live task, which is left unchanged, unless the task's
// OnConflict rule changed it (Result.Changed).
//
// Calls from many goroutines share their round trips: a call made while
// another is in flight waits for it, and the calls made meanwhile then
// go to Redis together, as one EnqueueBatch would send them, each with
// its own result. A call made while none is in flight goes at once. A
// call whose ctx ends while it waits is not sent.
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
	return fmt.Sprintf("%s%d of %d tasks failed (not enqueued, or with ErrNotReplicated stored but not confirmed); first: %s",
		errtext.Prefix, e.Failed, e.Total, errtext.Trim(e.First.Error()))
}

// Unwrap returns the first failure so errors.Is works on a batch of one.
func (e *BatchError) Unwrap() error { return e.First }

// EnqueueBatch schedules tasks in one pipelined round trip. Results are
// in the order of tasks. The error is nil when every task was enqueued,
// otherwise a *BatchError; invalid tasks are rejected without being
// sent while the valid ones still go.
//
// A batch of up to 64 tasks shares its round trip as Enqueue calls do: made
// while another such call is in flight, it waits for it and goes with
// the calls made meanwhile, each shard's tasks of all of them in one
// script call. A larger batch goes at once, alone.
func (c *Client) EnqueueBatch(ctx context.Context, tasks []Task) ([]Result, error) {
	if c.tracer != nil {
		return c.enqueueTraced(ctx, tasks)
	}
	return c.enqueueBatch(ctx, tasks, "")
}

// enqueueBatch is EnqueueBatch; its tasks carry traceParent when it is
// not "" (docs/tracing.md).
func (c *Client) enqueueBatch(ctx context.Context, tasks []Task, traceParent string) ([]Result, error) {
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
		a.TraceParent = traceParent
		args = append(args, a)
		generated = append(generated, t.ID == "")
		idx = append(idx, i)
	}
	if len(args) > 0 {
		for j, r := range c.enqueueRetrying(ctx, args, generated) {
			out[idx[j]].Due, out[idx[j]].Err = r.Due, r.Err
		}
		c.resolveConflicts(ctx, tasks, out, traceParent)
		c.explainUnknownQueues(ctx, tasks, out)
		c.countEnqueued(tasks, out)
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

// toArgs checks t and returns its enqueue arguments, with a generated id
// (the next of c.runs) when t has none and passes the checks.
func (c *Client) toArgs(t Task) (shard.EnqueueArgs, error) {
	a, err := c.check(t)
	if err == nil && a.ID == "" {
		a.ID = c.runs.NewID(c.store.Layout())
	}
	if err == nil && t.Key != "" {
		a.ID, err = shard.KeyedID(t.Key, a.ID)
		if err != nil {
			err = fmt.Errorf("%w: key %q with id %q must make an id of %s, the key %s", ErrInvalidArgument, truncate(t.Key), truncate(t.ID), shard.IDRule, shard.KeyRule)
		}
	}
	return a, err
}

// check checks t and returns its enqueue arguments, the id as t has it
// (empty: one is to be generated).
func (c *Client) check(t Task) (shard.EnqueueArgs, error) {
	a := shard.EnqueueArgs{ID: t.ID, Queue: t.Queue, Payload: t.Payload, Due: t.At, Delay: t.Delay, MaxRetries: -1, Timeout: t.Timeout}
	switch {
	case a.ID != "" && !shard.ValidID(a.ID):
		return a, fmt.Errorf("%w: task id %q must be %s", ErrInvalidArgument, truncate(a.ID), shard.IDRule)
	case !shard.ValidQueue(t.Queue):
		return a, fmt.Errorf("%w: queue name %q must match %s", ErrInvalidArgument, truncate(t.Queue), shard.QueueRule)
	case int64(len(t.Payload)) > c.maxPayload:
		return a, fmt.Errorf("%w: %d bytes > %d", ErrPayloadTooLarge, len(t.Payload), c.maxPayload)
	case t.Delay < 0:
		return a, fmt.Errorf("%w: negative delay %s", ErrInvalidArgument, t.Delay)
	case !t.At.IsZero() && t.At.UnixMilli() <= 0:
		return a, fmt.Errorf("%w: due time %s before 1970", ErrInvalidArgument, t.At)
	case t.Timeout < 0 || (t.Timeout > 0 && t.Timeout < time.Millisecond):
		return a, fmt.Errorf("%w: timeout %s must be 0 (queue default) or at least 1ms", ErrInvalidArgument, t.Timeout)
	case t.UniqueFor < 0 || (t.UniqueFor > 0 && t.UniqueFor < time.Millisecond):
		return a, fmt.Errorf("%w: UniqueFor %s must be 0 or at least 1ms", ErrInvalidArgument, t.UniqueFor)
	}
	a.UniqueFor = t.UniqueFor
	if !t.Priority.Valid() {
		return a, fmt.Errorf("%w: priority %d (want PriorityHigh, PriorityNormal or PriorityLow)", ErrInvalidArgument, int(t.Priority))
	}
	a.Priority = t.Priority
	if t.MaxRetries != nil {
		if *t.MaxRetries < 0 || *t.MaxRetries > MaxRetriesLimit {
			return a, fmt.Errorf("%w: max retries %d not in 0..%d", ErrInvalidArgument, *t.MaxRetries, MaxRetriesLimit)
		}
		a.MaxRetries = *t.MaxRetries
	}
	return a, nil
}

// Cancel ends a task in any state and returns the state it was cancelled
// from (as inspect's Cancel does). A scheduled, ready or dead-lettered
// task is deleted. A task a worker has (StateActive: running, or popped
// and about to run) ends as StateCancelled: its lease is revoked, so that
// nothing its worker reports is recorded and it is never retried, and
// the worker is told at once to cancel its handler's ctx (the cause is
// hourglass.ErrCancelled; a command gets SIGTERM, an HTTP call is
// aborted); Lookup reports it cancelled for a day. Either way its id can
// be enqueued again. It returns ErrNotFound for an unknown id.
func (c *Client) Cancel(ctx context.Context, id string) (State, error) {
	if !shard.ValidStoredID(id) {
		return "", fmt.Errorf("%w: task id %q", ErrInvalidArgument, truncate(id))
	}
	c.layout.Layout(ctx)
	st, q, err := c.store.CancelQueue(ctx, id)
	if err != nil {
		return "", err
	}
	if st != string(StateDead) {
		c.hist.Count(q, shard.HistCancelled, 1)
	}
	return State(st), nil
}

// countEnqueued adds the tasks stored (not a live task changed by its
// OnConflict rule, nor one stored but not confirmed by replicas) to the
// queue history.
func (c *Client) countEnqueued(tasks []Task, out []Result) {
	if c.hist == nil {
		return
	}
	for i, r := range out {
		if r.Err == nil && !r.Changed {
			c.hist.Count(tasks[i].Queue, shard.HistEnqueued, 1)
		}
	}
}

// State is where a task is in its life: hourglass.State, which inspect
// reports too.
type State = hourglass.State

// Task states reported by Lookup (hourglass's).
const (
	StateScheduled = hourglass.StateScheduled // waiting for its due time
	StateReady     = hourglass.StateReady     // due, waiting for a worker
	StateActive    = hourglass.StateActive    // handed to a worker: running, leased or not yet
	StateDead      = hourglass.StateDead      // in the dead-letter queue
	StateCancelled = hourglass.StateCancelled // cancelled (recorded: see hourglass.StateCancelled)
	StateSucceeded = hourglass.StateSucceeded // succeeded, in a queue that keeps records (Result, Wait)
)

// Info is a task as Lookup sees it.
//
// Deprecated: Lookup returns hourglass.TaskInfo, the view inspect
// returns too; Info is that type. Its fields LeaseUntil, DeadReason and
// Corrupt are LeaseDeadline, Dead (a struct) and Problem (a text).
type Info = hourglass.TaskInfo

// Lookup returns a stored task: its state, data, lease deadline (active),
// dead-letter record and last error (dead), with its whole payload; the
// same view as inspect's Task. Data that cannot be decoded is reported in
// TaskInfo.Problem, not as an error. ErrNotFound if no task of that id is
// stored: tasks that finished are deleted and are not found.
func (c *Client) Lookup(ctx context.Context, id string) (hourglass.TaskInfo, error) {
	if !shard.ValidStoredID(id) {
		return hourglass.TaskInfo{}, fmt.Errorf("%w: task id %q", ErrInvalidArgument, truncate(id))
	}
	c.layout.Layout(ctx)
	in, err := c.store.Lookup(ctx, id)
	if err != nil {
		return hourglass.TaskInfo{}, err
	}
	return in.View(), nil
}

// Exists reports whether a task with id is stored, in any state
// (scheduled, ready, running or dead-lettered). Tasks that finished are
// deleted and do not exist. One round trip (two while a change of the
// shard count moves the id).
func (c *Client) Exists(ctx context.Context, id string) (bool, error) {
	if !shard.ValidStoredID(id) {
		return false, fmt.Errorf("%w: task id %q", ErrInvalidArgument, truncate(id))
	}
	c.layout.Layout(ctx)
	return c.store.Exists(ctx, id)
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
