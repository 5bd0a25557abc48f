package shard

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Store runs Hourglass's scripts against one Redis deployment.
// It is safe for concurrent use.
type Store struct {
	rdb redis.UniversalClient
	l   Layout
}

// NewStore returns a Store for layout l on rdb.
func NewStore(rdb redis.UniversalClient, l Layout) *Store { return &Store{rdb: rdb, l: l} }

// Layout returns the store's key layout.
func (s *Store) Layout() Layout { return s.l }

// Redis returns the underlying client.
func (s *Store) Redis() redis.UniversalClient { return s.rdb }

// QueuePolicy is what the scripts need to know about a queue: enqueue
// defaults and limits, and the backoff of retries.
type QueuePolicy struct {
	MaxRetries int
	Timeout    time.Duration
	MaxPayload int64
	// Backoff of retries; the zero value means DefaultBackoff.
	Backoff Backoff
}

// Backoff is an exponential retry delay: attempt n (1-based) waits
// min(Cap, Base*Factor^(n-1)), half of it fixed and half random ("equal
// jitter").
type Backoff struct {
	Base, Cap time.Duration
	Factor    float64
}

// DefaultBackoff is used where no backoff is configured.
var DefaultBackoff = Backoff{Base: time.Second, Cap: time.Hour, Factor: 2}

func (b Backoff) orDefault() Backoff {
	if b == (Backoff{}) {
		return DefaultBackoff
	}
	return b
}

// spec renders b as the scripts read it: "base_ms|cap_ms|factor".
func (b Backoff) spec() string {
	b = b.orDefault()
	return fmt.Sprintf("%d|%d|%s", b.Base.Milliseconds(), b.Cap.Milliseconds(), strconv.FormatFloat(b.Factor, 'f', -1, 64))
}

// Delay is the delay after failed attempt n (1-based) for a jitter value
// rnd in [0,1); it mirrors backoff_ms in lua/lib.lua.
func (b Backoff) Delay(n int, rnd float64) time.Duration {
	b = b.orDefault()
	d := float64(b.Base.Milliseconds()) * math.Pow(b.Factor, float64(n-1))
	d = math.Min(d, float64(b.Cap.Milliseconds()))
	return time.Duration(math.Floor(d/2+rnd*d/2)) * time.Millisecond
}

func (p QueuePolicy) encode() string {
	return fmt.Sprintf("%d|%d|%d|%s", p.MaxRetries, p.Timeout.Milliseconds(), p.MaxPayload, p.Backoff.spec())
}

// RegisterQueues records the queues and their policies in every shard,
// so that enqueues to them are accepted. Queues already registered and
// absent from policies are left alone: tasks may still reference them.
func (s *Store) RegisterQueues(ctx context.Context, policies map[string]QueuePolicy) error {
	pipe := s.rdb.Pipeline()
	for sh := 0; sh < s.l.shards; sh++ {
		vals := make([]any, 0, 2*len(policies))
		for q, p := range policies {
			if !ValidQueue(q) {
				return fmt.Errorf("%w: queue name %q", ErrInvalidArgument, q)
			}
			vals = append(vals, q, p.encode())
		}
		pipe.HSet(ctx, s.l.Queues(sh), vals...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("shard: register queues: %w", err)
	}
	return nil
}

// FarTier configures the far tier (see docs/protocol.md): a task due in
// bucket b (its due time rounded down to a multiple of Bucket) is kept in
// b's list instead of the delayed set while b - Lead is in the future, and
// the shard's owner promotes the bucket into the delayed set from b - Lead
// on. A list entry costs a fraction of a sorted-set member; a bucket costs
// a few hundred bytes, so the tier pays off with a few tasks per bucket.
type FarTier struct {
	Bucket time.Duration // 0 turns the tier off
	Lead   time.Duration
}

// SetFarTier records the far tier's settings in every shard. Turning it
// off affects new enqueues only: buckets already stored are promoted as
// usual.
func (s *Store) SetFarTier(ctx context.Context, f FarTier) error {
	if f.Bucket < 0 || f.Lead < 0 || (f.Bucket > 0 && (f.Bucket < time.Second || f.Lead < time.Second)) {
		return fmt.Errorf("%w: far tier bucket %s and lead %s (want 0, or both at least 1s)", ErrInvalidArgument, f.Bucket, f.Lead)
	}
	pipe := s.rdb.Pipeline()
	for sh := 0; sh < s.l.shards; sh++ {
		if f.Bucket == 0 {
			pipe.HDel(ctx, s.l.Queues(sh), farField)
		} else {
			pipe.HSet(ctx, s.l.Queues(sh), farField, fmt.Sprintf("%d|%d", f.Bucket.Milliseconds(), f.Lead.Milliseconds()))
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("shard: set far tier: %w", err)
	}
	return nil
}

// farField is the field of the queues hash that holds the far tier's
// settings, "bucket_ms|lead_ms"; no queue name contains "|".
const farField = "|far"

// EnqueueArgs are the arguments of one enqueue. Exactly one of Due and
// Delay decides the due time: a non-zero Due is absolute, otherwise the
// task is due Delay after Redis server time.
type EnqueueArgs struct {
	ID         string
	Queue      string
	Payload    []byte
	Due        time.Time
	Delay      time.Duration
	MaxRetries int           // < 0: the queue's default
	Timeout    time.Duration // 0: the queue's default
}

// EnqueueResult is the outcome of one enqueue.
type EnqueueResult struct {
	// Due is the task's due time; for a duplicate, the due time of the
	// live task if it is still scheduled, else zero.
	Due time.Time
	// State is the live task's state when Err is ErrDuplicate.
	State string
	// Err is nil, or wraps ErrDuplicate, ErrUnknownQueue,
	// ErrPayloadTooLarge, ErrInvalidArgument or a Redis error.
	Err error
}

// enqueueArgs renders one task as the script's six arguments.
func enqueueArgs(a EnqueueArgs) []any {
	due := "+" + strconv.FormatInt(a.Delay.Milliseconds(), 10)
	if !a.Due.IsZero() {
		due = strconv.FormatInt(a.Due.UnixMilli(), 10)
	}
	retries, timeout := "", ""
	if a.MaxRetries >= 0 {
		retries = strconv.Itoa(a.MaxRetries)
	}
	if a.Timeout > 0 {
		timeout = strconv.FormatInt(a.Timeout.Milliseconds(), 10)
	}
	return []any{a.ID, due, a.Queue, retries, timeout, a.Payload}
}

// enqueueChunk bounds the tasks of one script call, so that no call keeps
// Redis busy for long.
const enqueueChunk = 256

// Enqueue stores one task in its shard.
func (s *Store) Enqueue(ctx context.Context, a EnqueueArgs) EnqueueResult {
	return s.EnqueueBatch(ctx, []EnqueueArgs{a})[0]
}

// EnqueueBatch stores many tasks in one pipelined round trip: one script
// call per shard (per enqueueChunk tasks). Each result reports its own
// outcome.
func (s *Store) EnqueueBatch(ctx context.Context, as []EnqueueArgs) []EnqueueResult {
	out := make([]EnqueueResult, len(as))
	byShard := make(map[int][]int)
	for i, a := range as {
		sh := s.l.ShardOf(a.ID)
		byShard[sh] = append(byShard[sh], i)
	}
	var calls []scriptCall
	var members [][]int // task indexes of each call
	for sh, idx := range byShard {
		for len(idx) > 0 {
			n := min(len(idx), enqueueChunk)
			args := make([]any, 1, 1+6*n)
			args[0] = s.l.WakeChannel(sh)
			for _, i := range idx[:n] {
				args = append(args, enqueueArgs(as[i])...)
			}
			calls = append(calls, scriptCall{keys: []string{s.l.Delayed(sh), s.l.Tasks(sh), s.l.Queues(sh), s.l.Far(sh)}, args: args})
			members = append(members, idx[:n])
			idx = idx[n:]
		}
	}
	cmds, err := enqueueScript.runPipelined(ctx, s.rdb, calls)
	for c, idx := range members {
		if err != nil {
			for _, i := range idx {
				out[i].Err = err
			}
			continue
		}
		v, cerr := cmds[c].Slice()
		for k, i := range idx {
			switch {
			case cerr != nil:
				out[i].Err = fmt.Errorf("shard: enqueue %q: %w", as[i].ID, cerr)
			case len(v) != 3*len(idx):
				out[i].Err = fmt.Errorf("shard: enqueue %q: unexpected reply of %d values", as[i].ID, len(v))
			default:
				out[i] = parseEnqueue(as[i], v[3*k:3*k+3])
			}
		}
	}
	return out
}

func parseEnqueue(a EnqueueArgs, v []any) EnqueueResult {
	code, _ := v[0].(int64)
	due, _ := v[1].(int64)
	detail, _ := v[2].(string)
	switch code {
	case 1:
		return EnqueueResult{Due: time.UnixMilli(due)}
	case 0:
		r := EnqueueResult{State: detail, Err: fmt.Errorf("%w: %q is %s", ErrDuplicate, a.ID, detail)}
		if due >= 0 {
			r.Due = time.UnixMilli(due)
		}
		return r
	case -1:
		return EnqueueResult{Err: fmt.Errorf("%w: %q (register it in the scheduler's queues config)", ErrUnknownQueue, detail)}
	case -2:
		return EnqueueResult{Err: fmt.Errorf("%w: %d bytes, queue %q allows %s", ErrPayloadTooLarge, len(a.Payload), a.Queue, detail)}
	default:
		return EnqueueResult{Err: fmt.Errorf("%w: %s", ErrInvalidArgument, detail)}
	}
}

// Cancel deletes a task that is not running and returns the state it was
// in. It returns ErrNotFound or ErrActive.
func (s *Store) Cancel(ctx context.Context, id string) (string, error) {
	if !ValidID(id) {
		return "", fmt.Errorf("%w: task id %q", ErrInvalidArgument, id)
	}
	sh := s.l.ShardOf(id)
	v, err := cancelScript.Run(ctx, s.rdb,
		[]string{s.l.Delayed(sh), s.l.Tasks(sh), s.l.Inflight(sh), s.l.Dead(sh), s.l.DeadInfo(sh), s.l.Errors(sh)},
		id, s.l.ReadyPrefix(sh), s.l.PendingPrefix(sh)).Slice()
	if err != nil {
		return "", fmt.Errorf("shard: cancel %q: %w", id, err)
	}
	code, _ := v[0].(int64)
	state, _ := v[1].(string)
	switch code {
	case 1:
		return state, nil
	case 0:
		return "", fmt.Errorf("%w: %q", ErrNotFound, id)
	default:
		return state, fmt.Errorf("%w: %q", ErrActive, id)
	}
}

// Info is a task's state as seen by Lookup.
type Info struct {
	State string // scheduled, ready, active or dead
	Task  Task   // zero fields except ID when the data is missing
	// At is the due time (scheduled), lease deadline (active; zero for a
	// task a worker popped and runs without a lease yet) or burial time
	// (dead).
	At time.Time
	// DeadInfo is the JSON burial record of a dead task.
	DeadInfo string
	// DecodeErr is set when the stored data is not decodable.
	DecodeErr error
}

// Lookup returns a task's state. It returns ErrNotFound for unknown ids.
func (s *Store) Lookup(ctx context.Context, id string) (Info, error) {
	if !ValidID(id) {
		return Info{}, fmt.Errorf("%w: task id %q", ErrInvalidArgument, id)
	}
	sh := s.l.ShardOf(id)
	v, err := lookupScript.Run(ctx, s.rdb,
		[]string{s.l.Delayed(sh), s.l.Tasks(sh), s.l.Inflight(sh), s.l.Dead(sh), s.l.DeadInfo(sh)},
		id, s.l.PendingPrefix(sh), s.l.ReadyPrefix(sh)).StringSlice()
	if err != nil {
		return Info{}, fmt.Errorf("shard: lookup %q: %w", id, err)
	}
	if len(v) != 4 || v[0] == "" {
		return Info{}, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	info := Info{State: v[0], DeadInfo: v[3], Task: Task{ID: id}}
	if v[1] != "" {
		info.Task, info.DecodeErr = Decode(id, []byte(v[1]))
		if info.DecodeErr != nil {
			info.Task = Task{ID: id}
		}
	} else {
		info.DecodeErr = fmt.Errorf("%w: %q: no task data", ErrUndecodable, id)
	}
	if v[2] != "" {
		if ms, err := strconv.ParseFloat(v[2], 64); err == nil {
			info.At = time.UnixMilli(int64(ms))
		}
	}
	return info, nil
}

// MoveResult is the outcome of one mover call.
type MoveResult struct {
	Moved   int   // tasks pushed to ready lists
	Buried  int   // undecodable or data-less members sent to the DLQ
	NextDue int64 // due ms of the earliest remaining task, -1 if none
	Now     int64 // Redis server time of the call, unix ms
	// NowMicros is the same time in microseconds.
	NowMicros int64
	Late      []int64 // now - due of every moved task, ms; negative when moved ahead
	// Promoted counts far-tier entries taken into the delayed set; when
	// it is positive the caller should call again at once.
	Promoted int
}

// Move moves at most limit due tasks of shard sh into their ready lists,
// fenced by epoch. It returns an error wrapping ErrStaleEpoch when a newer
// owner has run a fenced script on the shard.
func (s *Store) Move(ctx context.Context, sh int, epoch int64, limit int) (MoveResult, error) {
	return s.MoveAhead(ctx, sh, epoch, limit, 0)
}

// MoveAhead is Move that also moves tasks due up to prefetch after
// Redis's current time (whole milliseconds; 0 is Move). Workers hold such
// a task until its due time (see worker.Task.Due); the mover calls again
// before the next remaining task is within prefetch of being due.
func (s *Store) MoveAhead(ctx context.Context, sh int, epoch int64, limit int, prefetch time.Duration) (MoveResult, error) {
	v, err := moveScript.Run(ctx, s.rdb,
		[]string{s.l.Delayed(sh), s.l.Tasks(sh), s.l.Epoch(sh), s.l.Dead(sh), s.l.DeadInfo(sh), s.l.Stats(sh), s.l.Seq(sh), s.l.ReadyQueues(sh), s.l.Far(sh)},
		epoch, limit, s.l.ReadyPrefix(sh), s.l.PendingPrefix(sh), prefetch.Milliseconds()).Int64Slice()
	if err != nil {
		return MoveResult{}, fmt.Errorf("shard: move shard %d: %w", sh, err)
	}
	if len(v) >= 2 && v[0] == -1 {
		return MoveResult{}, fmt.Errorf("%w: shard %d: epoch %d, current %d", ErrStaleEpoch, sh, epoch, v[1])
	}
	if len(v) < 6 {
		return MoveResult{}, fmt.Errorf("shard: move shard %d: unexpected reply %v", sh, v)
	}
	return MoveResult{Moved: int(v[1]), NextDue: v[2], Now: v[3] / 1000, NowMicros: v[3], Buried: int(v[4]), Promoted: int(v[5]), Late: v[6:]}, nil
}

// StaleEpochRejections returns how many fenced calls shard sh rejected.
func (s *Store) StaleEpochRejections(ctx context.Context, sh int) (int64, error) {
	n, err := s.rdb.HGet(ctx, s.l.Stats(sh), "stale_epoch").Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return n, err
}

// StoredEpoch returns the fencing epoch recorded in shard sh (0 if none).
func (s *Store) StoredEpoch(ctx context.Context, sh int) (int64, error) {
	n, err := s.rdb.Get(ctx, s.l.Epoch(sh)).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return n, err
}
