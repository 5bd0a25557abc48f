// Package inspect is Hourglass's administration API: queue depths and
// policies, task listing, lookup and cancel, the dead-letter queue (list,
// show, replay, purge), pause and resume, shard owners, the shard layout
// and changing the shard count online (Layout, Resize), and the state of
// periodic schedules (last occurrence, next ones, pause). The admin CLI
// (cmd/hourglass) and the scheduler's web dashboard are two faces of it;
// users' own tools can use it the same way.
//
// Everything here reads and writes Redis only. Shard owners live in the
// schedulers' etcd: Config.Owners takes a reader of them, which package
// inspect/etcdowners provides, so that only a program that asks for
// owners links etcd's client and gRPC.
//
// Every Redis operation is one bounded Lua script call per shard (see
// internal/shard): a listing returns a page and a cursor, and a bulk
// operation (replay or purge by filter) is many bounded calls, each
// reported to an optional progress function. Nothing here scans a whole
// shard in one call.
package inspect

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass"
	"github.com/hourglass-sched/hourglass/internal/errtext"
	"github.com/hourglass-sched/hourglass/internal/shard"
)

// Sentinel errors callers can test with errors.Is. ErrNotFound,
// ErrInvalidArgument, ErrInvalidConfig, ErrActive and ErrDead are package
// hourglass's values, which client and worker return too:
// inspect.ErrActive is client.ErrActive. They are kinds: an error of a
// kind reads as what happened, after the "hourglass: " every error
// starts with, without the kind's own text ("hourglass: task not found:
// \"x\"", "hourglass: queue \"x\" is not registered").
var (
	// ErrNotFound: no task, dead letter, queue or schedule of that name.
	ErrNotFound = hourglass.ErrNotFound
	// ErrInvalidArgument: a bad queue name, policy, cursor, filter or
	// schedule.
	ErrInvalidArgument = hourglass.ErrInvalidArgument
	// ErrInvalidConfig: a Config New cannot use. It also matches
	// ErrInvalidArgument.
	ErrInvalidConfig = hourglass.ErrInvalidConfig
	// ErrActive: the task is running and cannot be cancelled or changed.
	ErrActive = hourglass.ErrActive
	// ErrDead: the task is a dead letter and cannot be changed (replay it).
	ErrDead = hourglass.ErrDead
	// ErrTaskActive is ErrActive.
	//
	// Deprecated: use ErrActive, the name client uses.
	ErrTaskActive = ErrActive
	// ErrNoEtcd was meant for a call that needs etcd without a client.
	//
	// Deprecated: never returned. Shards without Config.Owners leaves
	// the owners empty; etcd is read by package inspect/etcdowners.
	ErrNoEtcd = errors.New("hourglass: no etcd client configured")
	// ErrResizeRunning: Resize was refused because another change of the
	// shard count runs (or one was left half-prepared with another
	// count).
	ErrResizeRunning = errors.New("hourglass: a change of the shard count is running")
	// ErrPartial: a call over every shard could not read some of them
	// (their data is corrupt: a key of the wrong type, an epoch that is
	// not a number); its result holds the others. The error is a
	// *PartialError naming each shard.
	ErrPartial = errors.New("hourglass: some shards could not be read")
)

// kindError is an error of one of the sentinel kinds above (its kind,
// for errors.Is) whose message says what happened once, after the
// "hourglass: " of every error: "hourglass: task not found: \"x\"", not
// "hourglass: not found: hourglass: task not found: \"x\"". The kind's
// own text is left out (the kind is for programs; a person reads the
// message).
type kindError struct {
	kind  error
	msg   string
	cause error // the error it reports, or nil
}

func (e *kindError) Error() string { return e.msg }

// Unwrap returns the kind and the cause.
func (e *kindError) Unwrap() []error {
	if e.cause == nil {
		return []error{e.kind}
	}
	return []error{e.kind, e.cause}
}

// errorf returns an error of kind with the message format makes (whose
// %w, if any, it wraps), after "hourglass: ".
func errorf(kind error, format string, args ...any) error {
	err := errtext.Errorf(format, args...)
	return &kindError{kind: kind, msg: err.Error(), cause: err}
}

// ofKind returns err as an error of kind, with err's message, which
// says "hourglass: " once.
func ofKind(kind, err error) error {
	return &kindError{kind: kind, msg: errtext.Prefix + errtext.Trim(err.Error()), cause: err}
}

// ShardProblem is a shard a call could not read, and why.
type ShardProblem struct {
	Shard int    `json:"shard"`
	Error string `json:"error"`
}

// PartialError is returned, with the rest of the result, by a call over
// every shard that could not read some of them (Queues, Queue, Shards,
// Layout). It wraps ErrPartial. A failure to reach Redis at all is not
// partial: the call then fails as a whole.
type PartialError struct {
	Problems []ShardProblem
}

func (e *PartialError) Error() string {
	msg := fmt.Sprintf("%s%d shard(s) could not be read, the rest is shown", errtext.Prefix, len(e.Problems))
	for _, p := range e.Problems {
		msg += fmt.Sprintf("; shard %d: %s", p.Shard, p.Error)
	}
	return msg
}

// Unwrap returns ErrPartial.
func (e *PartialError) Unwrap() error { return ErrPartial }

// partialOf converts the store's partial-read error; other errors, and
// nil, are returned as they are (mapped).
func partialOf(err error) error {
	var pe *shard.PartialError
	if !errors.As(err, &pe) {
		return mapErr(err)
	}
	out := &PartialError{}
	for sh, e := range pe.Failed {
		out.Problems = append(out.Problems, ShardProblem{Shard: sh, Error: errtext.Trim(e.Error())})
	}
	slices.SortFunc(out.Problems, func(a, b ShardProblem) int { return a.Shard - b.Shard })
	return out
}

// problems returns the problem of each shard of err (a *PartialError),
// by shard.
func problems(err error) map[int]string {
	var pe *PartialError
	if !errors.As(err, &pe) {
		return nil
	}
	m := make(map[int]string, len(pe.Problems))
	for _, p := range pe.Problems {
		m[p.Shard] = p.Error
	}
	return m
}

// joinPartial merges the shard problems of two partial errors (either
// may be nil).
func joinPartial(a, b error) error {
	var pa, pb *PartialError
	errors.As(a, &pa)
	errors.As(b, &pb)
	switch {
	case pa == nil && pb == nil:
		return nil
	case pa == nil:
		return pb
	case pb == nil:
		return pa
	}
	seen := problems(pa)
	out := &PartialError{Problems: slices.Clone(pa.Problems)}
	for _, p := range pb.Problems {
		if _, ok := seen[p.Shard]; !ok {
			out.Problems = append(out.Problems, p)
		}
	}
	slices.SortFunc(out.Problems, func(a, b ShardProblem) int { return a.Shard - b.Shard })
	return out
}

// Config configures an Inspector. Namespace must be the deployment's
// (the same as the schedulers'); Shards is its shard count before any
// change of it (the schedulers' configured count): once the count was
// changed, the layout record in Redis says it (Layout). Zero values mean
// the defaults ("hourglass", 16).
type Config struct {
	// Namespace prefixes every key; default "hourglass".
	Namespace string
	// Shards is the shard count before any change of it; default 16.
	Shards int
	// Owners, when set, gives shard owners and epochs (Shards). The
	// owners are in the schedulers' etcd: etcdowners.New (package
	// github.com/hourglass-sched/hourglass/inspect/etcdowners) reads
	// them. It is an interface so that a program that only reads queues
	// and tasks does not link etcd's client and gRPC. Nil: owners are
	// left empty.
	Owners OwnerReader
}

// Validate reports a Config New cannot use, wrapping ErrInvalidConfig
// (and ErrInvalidArgument). Zero fields are valid: they mean the
// defaults.
func (c Config) Validate() error {
	if _, err := shard.NewLayout(shard.LayoutDefaults(c.Namespace, c.Shards)); err != nil {
		return ofKind(ErrInvalidConfig, err)
	}
	return nil
}

// OwnerReader reads which scheduler replica owns each shard.
type OwnerReader interface {
	// Owners returns the owner of every owned shard, by shard; an
	// unowned shard is absent.
	Owners(ctx context.Context) (map[int]Owner, error)
}

// Owner is the scheduler replica that owns a shard, as its election
// records it.
type Owner struct {
	// Replica is the owner's replica id.
	Replica string
	// Epoch is the owner's fencing epoch (in etcd, the revision that
	// created its ownership key): Shard.Epoch.
	Epoch int64
}

// Inspector reads and administers one deployment. It is safe for
// concurrent use.
//
// The shard count is data (the layout record, see Layout). An Inspector
// follows it through the same follower as every Hourglass process
// (docs/resharding.md), and as an administration API it reads the record
// at every call that lists shards or writes to all of them (one small
// HGETALL), so that a long-lived Inspector (the dashboard's) follows a
// change of the count with no restart, and a listing or queue
// registration made just after a change started covers the new shards.
// A call by task id needs no read: it finds the id wherever a change has
// it, reading the record again only when the id is not in its shards.
// While a change runs, the calls cover shards 0..Existing-1 (the old and the
// new ones); afterwards, the new count's shards.
type Inspector struct {
	rdb    redis.UniversalClient
	store  *shard.Store
	follow *shard.Follower
	owners OwnerReader
}

// New returns an Inspector on rdb for the deployment cfg describes. It
// does no I/O and does not own rdb.
func New(rdb redis.UniversalClient, cfg Config) (*Inspector, error) {
	if rdb == nil {
		return nil, errorf(ErrInvalidConfig, "nil redis client")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	l, err := shard.NewLayout(shard.LayoutDefaults(cfg.Namespace, cfg.Shards))
	if err != nil {
		return nil, ofKind(ErrInvalidConfig, err)
	}
	store := shard.NewStore(rdb, l)
	follow, err := store.Follow(shard.FollowConfig{})
	if err != nil {
		return nil, ofKind(ErrInvalidConfig, err)
	}
	return &Inspector{rdb: rdb, store: store, follow: follow, owners: cfg.Owners}, nil
}

// ShardCount returns the shard count new tasks are placed by, as the
// Inspector last read it (Config.Shards before its first call that
// reads the layout record). It does no I/O; Layout reads the record.
func (i *Inspector) ShardCount() int { return i.store.Layout().Shards() }

// Namespace returns the deployment's namespace.
func (i *Inspector) Namespace() string { return i.store.Layout().Namespace() }

// NamespaceScanBudget is how many keys Namespaces examines at most on
// each Redis node.
const NamespaceScanBudget = 100_000

// Namespaces returns the namespaces that have queues registered on the
// Inspector's Redis (its own among them when it has), sorted: a hint for
// a person who sees an empty namespace. It SCANs each node, examining at
// most NamespaceScanBudget keys there; complete is false when it stopped
// before the end of a node's keys. A user whose ACL is limited to its
// namespace (docs/operations.md) has no SCAN: the error is then Redis's
// NOPERM.
func (i *Inspector) Namespaces(ctx context.Context) (names []string, complete bool, err error) {
	return shard.Namespaces(ctx, i.rdb, NamespaceScanBudget)
}

// layout reads the layout record now and returns the layout a call
// works by; the store adopts it too, so the ids it places and looks up
// follow the same record.
func (i *Inspector) layout(ctx context.Context) (shard.Layout, error) {
	return i.follow.Check(ctx) // its error names the read ("shard: read layout: ...")
}

// Counts are the tasks of a queue (or of all queues) by state.
type Counts struct {
	// Scheduled tasks wait for their due time (the far tier included).
	Scheduled int64 `json:"scheduled"`
	// Ready tasks are due and wait in a ready list for a worker.
	Ready int64 `json:"ready"`
	// InFlight tasks are taken by a worker: leased, or popped and not yet
	// leased.
	InFlight int64 `json:"in_flight"`
	// Dead tasks are in the dead-letter queue.
	Dead int64 `json:"dead"`
}

// Total is the sum of every state.
func (c Counts) Total() int64 { return c.Scheduled + c.Ready + c.InFlight + c.Dead }

func (c *Counts) add(o Counts) {
	c.Scheduled += o.Scheduled
	c.Ready += o.Ready
	c.InFlight += o.InFlight
	c.Dead += o.Dead
}

// Policy is a queue's policy: enqueue defaults and limits and the
// backoff of retries. As input (SetQueue) a zero field means its default
// (DefaultPolicy), and MaxRetries, whose 0 means never retry, is a
// pointer whose nil means the default; as read (Queue, Queues) every
// field is set, MaxRetries non-nil, but for a queue that holds tasks and
// is registered nowhere, whose Policy is the zero value.
type Policy struct {
	// MaxRetries is how often a failed task is retried before it is
	// dead-lettered, 0..1000 (0: never); nil: the default, 25.
	// hourglass.Retries makes the pointer.
	MaxRetries *int `json:"max_retries"`
	// Timeout is the handler timeout (and lease) of one attempt; 0: the
	// default, 30s.
	Timeout time.Duration `json:"timeout"`
	// MaxPayload is the largest payload an enqueue may carry, in bytes;
	// 0: the default, 1 MiB.
	MaxPayload int64 `json:"max_payload"`
	// BackoffBase, BackoffCap and BackoffFactor shape the delay before a
	// retry (base × factor^(attempt-1), capped, with jitter); each zero
	// field means its default (1s base, 1h cap, factor 2).
	BackoffBase   time.Duration `json:"backoff_base"`
	BackoffCap    time.Duration `json:"backoff_cap"`
	BackoffFactor float64       `json:"backoff_factor"`
}

// QueueState is a queue's administrative state.
type QueueState string

// Queue states.
const (
	// QueueActive: enqueues accepted, tasks delivered.
	QueueActive QueueState = "active"
	// QueuePaused: enqueues accepted and moved to ready lists, but workers
	// start no new task of the queue until it is resumed.
	QueuePaused QueueState = "paused"
	// QueueRemoved: enqueues refused; stored tasks drain, then the queue's
	// registration disappears (shard by shard).
	QueueRemoved QueueState = "removed"
)

// Queue describes one registered queue.
type Queue struct {
	Name   string     `json:"name"`
	State  QueueState `json:"state"`
	Policy Policy     `json:"policy"`
	// PausedAt is when the queue was paused (zero unless paused).
	PausedAt time.Time `json:"paused_at,omitzero"`
	Counts   Counts    `json:"counts"`
	// Shards holds the per-shard counts, in shard order, when asked for.
	Shards []Counts `json:"shards,omitempty"`
	// OldestReady is the due time of the ready task that has waited
	// longest (zero: none ready). Long ago, nobody consumes the queue.
	OldestReady time.Time `json:"oldest_ready,omitzero"`
	// Retention is how long and how many records of its ended tasks the
	// queue keeps (the schedulers' queues.<q>.retention and
	// retention_count); nil when it keeps none.
	Retention *Retention `json:"retention,omitempty"`
}

// Retention bounds the records a queue keeps of its ended tasks (their
// results, for client.Result and Wait, and Recent): each is kept for Age,
// and each shard keeps at most Count of the queue's, the oldest dropped
// first.
type Retention struct {
	Age   time.Duration `json:"age"`
	Count int           `json:"count"`
}

// State is where a task is: hourglass.State, which client reports too.
type State = hourglass.State

// States of a task (hourglass's).
const (
	StateScheduled = hourglass.StateScheduled
	StateReady     = hourglass.StateReady
	StateActive    = hourglass.StateActive
	StateDead      = hourglass.StateDead
	StateCancelled = hourglass.StateCancelled
	StateSucceeded = hourglass.StateSucceeded
)

// Task describes one stored task: hourglass.TaskInfo, the view
// client.Lookup returns too. A listing (ListTasks, ListDead) returns
// only the first PreviewBytes of each payload; Task (a lookup) returns
// all of it.
type Task = hourglass.TaskInfo

// DeadInfo is why and when a task was dead-lettered: hourglass.DeadInfo.
type DeadInfo = hourglass.DeadInfo

// Shard describes one shard: its owner (from Config.Owners, when set)
// and its depths.
type Shard struct {
	Shard int `json:"shard"`
	// Owner is the owning scheduler replica ("" when unowned or unknown).
	Owner string `json:"owner"`
	// Epoch is the owner's fencing epoch in etcd; StoredEpoch the one the
	// shard's scripts last saw in Redis.
	Epoch       int64  `json:"epoch"`
	StoredEpoch int64  `json:"stored_epoch"`
	Counts      Counts `json:"counts"`
	// Slot is the Redis Cluster hash slot of the shard's keys (their hash
	// tag's), and Node the address of the primary serving it, as the
	// client's slot map has it: "" on a single Redis.
	Slot int    `json:"slot"`
	Node string `json:"node,omitempty"`
	// Problem says why the shard's counts or stored epoch could not be
	// read (corrupt data); the call then returns a *PartialError too.
	Problem string `json:"problem,omitempty"`
}

// Progress reports a bulk operation: shards finished of all, calls made,
// entries examined and acted on so far.
type Progress struct {
	ShardsDone int   `json:"shards_done"`
	Shards     int   `json:"shards"`
	Calls      int   `json:"calls"`
	Scanned    int64 `json:"scanned"`
	Done       int64 `json:"done"`
}

// ProgressFunc receives a bulk operation's progress after each call.
type ProgressFunc func(Progress)
