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
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass"
	"github.com/hourglass-sched/hourglass/internal/shard"
)

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
	// Limits are the queue's flow-control limits set at run time
	// (SetQueueLimits); nil when none are set and the workers use their
	// own configuration.
	Limits *QueueLimits `json:"limits,omitempty"`
	// FairWindow is the window of a fair queue (the schedulers'
	// queues.<q>.fair and fair_window; docs/fairness.md): its due tasks
	// are taken in turns between their keys. 0: in due order.
	FairWindow int `json:"fair_window,omitempty"`
	// KeyConcurrency is a fair queue's default cap per key (the
	// schedulers' queues.<q>.key_concurrency; KeyConcurrency lists the
	// keys' own): 0 for none.
	KeyConcurrency int `json:"key_concurrency,omitempty"`
	// Routing says which workers may take the queue's tasks (SetRouting);
	// nil: any worker.
	Routing *Routing `json:"routing,omitempty"`
	// RoutingError says why the routing stored for the queue cannot be
	// read (written by a newer release, or by hand): the workers then take
	// none of its tasks until it is set again. "" for none.
	RoutingError string `json:"routing_error,omitempty"`
	// Workers counts the live workers that serve the queue and its
	// Routing admits (Eligible): 0 is "no eligible worker", its tasks
	// wait; -1 when the process registry could not be read, and for the
	// row of dead data that names no queue.
	Workers int `json:"workers"`
	// Canaries counts, when the Routing has a share, the workers of
	// Workers in its canary set: 0 leaves the share's shards to no one
	// (their tasks wait), Workers leaves the other shards to no one.
	Canaries int `json:"canaries,omitempty"`
}

// QueueLimits is a queue's cluster-wide flow control set at run time:
// while it is set it replaces, in every worker that consumes the queue
// under flow control (max_concurrency or rate_limit configured), the
// limits of the worker's own configuration, all of them; a zero field is
// off or the default, as in worker.QueueOptions: MaxConcurrency 0 no
// cap, Rate 0 no rate limit, Period 0 one second, Burst 0 one, Kind ""
// token_bucket (the others: sliding_window, fixed_window, leaky_bucket).
// Workers apply it within a moment of the change (the control channel's
// announcement). JSON: {"max_concurrency", "rate", "period_ms", "burst",
// "kind"}.
type QueueLimits = shard.QueueLimits

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
