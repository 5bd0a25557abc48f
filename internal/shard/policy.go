package shard

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/errtext"
)

// Queue policy defaults and limits. The schedulers register each queue's
// policy (RegisterQueues); internal/config states a queue's defaults and
// bounds with these, and enqueue.lua enforces MaxRetriesLimit too.
const (
	// DefaultMaxRetries is a queue's retry limit unless configured.
	DefaultMaxRetries = 25
	// MaxRetriesLimit is the largest retry limit of a queue or a task.
	MaxRetriesLimit = 1000
	// DefaultTimeout is a queue's task timeout (the lease of one attempt)
	// unless configured; MinTimeout is the least a queue may set.
	DefaultTimeout = 30 * time.Second
	MinTimeout     = 100 * time.Millisecond
	// DefaultMaxPayload is the largest payload accepted unless
	// configured; MaxPayloadLimit is Redis's largest string.
	DefaultMaxPayload = 1 << 20
	MaxPayloadLimit   = 512 << 20
	// MinBackoffBase and MaxBackoffFactor bound a Backoff.
	MinBackoffBase   = time.Millisecond
	MaxBackoffFactor = 100
)

// QueuePolicy is what the scripts need to know about a queue: enqueue
// defaults and limits, and the backoff of retries.
type QueuePolicy struct {
	MaxRetries int
	Timeout    time.Duration
	MaxPayload int64
	// Backoff of retries; the zero value means DefaultBackoff.
	Backoff Backoff
	// Retention of the records of the queue's ended tasks; the zero value
	// keeps none.
	Retention Retention
	// FairWindow, when above 0, makes the queue fair (fair.go): its
	// ready list holds at most this many entries per shard, taken in
	// turns between the tasks' keys. 0: in due order.
	FairWindow int
	// KeyConcurrency, when above 0, caps the tasks of each key of a fair
	// queue that hold a permit at once (keycaps.go): taken when a task
	// enters the window, so a key at its cap has its tasks wait,
	// unclaimed. A key's own cap (Store.SetKeyConcurrency) overrides it.
	KeyConcurrency int
	// KeyRate, when its Rate is above 0, limits the tasks of each key of
	// a fair queue that enter its window, by a token bucket per key
	// (keycaps.go); a key's own (Store.SetKeyRate) overrides it.
	KeyRate KeyRate
}

// Retention says how long, and how many per shard, the records of a
// queue's ended tasks are kept: succeeded (with the handler's result) and
// cancelled, which Lookup reports and Client.Wait waits for (dead tasks
// are in the dead-letter set, under its own bounds). Age 0 keeps none.
type Retention struct {
	Age   time.Duration
	Count int // 0 means DefaultRetentionCount
}

// Retention bounds: a queue keeps records for at most MaxRetentionAge
// and MaxRetentionCount per shard; Count defaults to
// DefaultRetentionCount.
const (
	MinRetentionAge       = time.Second
	MaxRetentionAge       = 30 * 24 * time.Hour
	DefaultRetentionCount = 10000
	MaxRetentionCount     = 1000000
)

// Validate reports a Retention out of its bounds.
func (r Retention) Validate() error {
	if r.Age != 0 && (r.Age < MinRetentionAge || r.Age > MaxRetentionAge) {
		return fmt.Errorf("%w: retention %s not 0 nor in %s..%s", ErrInvalidArgument, r.Age, MinRetentionAge, MaxRetentionAge)
	}
	if r.Count < 0 || r.Count > MaxRetentionCount {
		return fmt.Errorf("%w: retention count %d not in 0..%d", ErrInvalidArgument, r.Count, MaxRetentionCount)
	}
	return nil
}

// spec renders r as the scripts read it (lib.lua's keep_of):
// "age_ms|count".
func (r Retention) spec() string {
	return fmt.Sprintf("%d|%d", r.Age.Milliseconds(), cmp.Or(r.Count, DefaultRetentionCount))
}

// keepField is the field of the queues hash that holds queue's
// Retention; no queue name contains "|".
func keepField(queue string) string { return "|keep|" + queue }

// Retentions reads the Retention of each of queues, as registered in
// shard 0 (one HMGET). A queue that keeps no records of its ended tasks
// has the zero Retention (Age 0); so has one whose field is not
// "age_ms|count" with a positive age, which the scripts (lib.lua's
// keep_of) do not read as a retention either.
func (s *Store) Retentions(ctx context.Context, queues []string) (map[string]Retention, error) {
	v, err := s.queueFields(ctx, queues, keepField, "retention")
	if err != nil {
		return nil, err
	}
	out := make(map[string]Retention, len(queues))
	for i, q := range queues {
		age, count, ok := strings.Cut(v[i], "|")
		ms, aerr := strconv.ParseInt(age, 10, 64)
		n, cerr := strconv.Atoi(count)
		if ok && aerr == nil && cerr == nil && ms > 0 && n >= 0 {
			out[q] = Retention{Age: time.Duration(ms) * time.Millisecond, Count: n}
		}
	}
	return out, nil
}

// queueFields reads field(q) of shard 0's queues hash for each of queues
// (one HMGET; none for no queues): each queue's value, "" where it has
// none. what names the fields in the error.
func (s *Store) queueFields(ctx context.Context, queues []string, field func(string) string, what string) ([]string, error) {
	if len(queues) == 0 {
		return nil, nil
	}
	fields := make([]string, len(queues))
	for i, q := range queues {
		fields[i] = field(q)
	}
	v, err := s.rdb.HMGet(ctx, s.k.Queues(0), fields...).Result()
	if err != nil {
		return nil, errtext.Errorf("read the queues' %s: %w", what, err)
	}
	out := make([]string, len(queues))
	for i := range v {
		out[i], _ = v[i].(string)
	}
	return out, nil
}

// queueCounts reads field(q) of the queues hash for each of queues, as
// queueFields does, and returns those that hold a number above 0.
func (s *Store) queueCounts(ctx context.Context, queues []string, field func(string) string, what string) (map[string]int, error) {
	v, err := s.queueFields(ctx, queues, field, what)
	if err != nil {
		return nil, err
	}
	out := make(map[string]int, len(queues))
	for i, q := range queues {
		if n, err := strconv.Atoi(v[i]); err == nil && n > 0 {
			out[q] = n
		}
	}
	return out, nil
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

// Validate reports a Backoff the scripts cannot use: the zero Backoff
// (DefaultBackoff) is valid; otherwise Base is at least MinBackoffBase,
// Cap at least Base, and Factor from 1 to MaxBackoffFactor.
func (b Backoff) Validate() error {
	switch {
	case b == (Backoff{}):
		return nil
	case b.Base < MinBackoffBase:
		return fmt.Errorf("%w: backoff base %s below %s", ErrInvalidArgument, b.Base, MinBackoffBase)
	case b.Cap < b.Base:
		return fmt.Errorf("%w: backoff cap %s below its base %s", ErrInvalidArgument, b.Cap, b.Base)
	case !(b.Factor >= 1 && b.Factor <= MaxBackoffFactor): // also catches NaN
		return fmt.Errorf("%w: backoff factor %g not in 1..%d", ErrInvalidArgument, b.Factor, MaxBackoffFactor)
	}
	return nil
}

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
	// The shards new tasks go to: while the count shrinks, the shards
	// being emptied keep what they had and are deleted at the end.
	l := s.Layout()
	marker := markerValue(l)
	names := make([]string, 0, len(policies))
	for q, p := range policies {
		if !ValidQueue(q) {
			return fmt.Errorf("%w: queue name %q", ErrInvalidArgument, q)
		}
		if err := p.Retention.Validate(); err != nil {
			return fmt.Errorf("queue %q: %w", q, err)
		}
		if p.FairWindow < 0 || p.FairWindow > MaxFairWindow {
			return fmt.Errorf("%w: queue %q: fair window %d not in 0..%d", ErrInvalidArgument, q, p.FairWindow, MaxFairWindow)
		}
		if p.KeyConcurrency < 0 || p.KeyConcurrency > MaxKeyConcurrency {
			return fmt.Errorf("%w: queue %q: concurrency per key %d not in 0..%d", ErrInvalidArgument, q, p.KeyConcurrency, MaxKeyConcurrency)
		}
		if err := p.KeyRate.Validate(); err != nil {
			return fmt.Errorf("queue %q: %w", q, err)
		}
		names = append(names, q)
	}
	slices.Sort(names)
	// The encoding first: "auto" reads whether shard 0 was registered
	// before, which the writes below would change.
	enc, ids, err := s.internQueues(ctx, names)
	if err != nil {
		return err
	}
	pipe := s.rdb.Pipeline()
	for sh := 0; sh < l.Shards(); sh++ {
		vals := make([]any, 0, 8*len(policies))
		var unkept []string
		for q, p := range policies {
			vals = append(vals, q, p.encode())
			if enc == EncodingCompact && ids[q] != "" {
				// One HSET with the policy: a shard never has the
				// number without its name.
				vals = append(vals, queueNamePrefix+ids[q], q, queueIDPrefix+q, ids[q])
			} else {
				unkept = append(unkept, queueIDPrefix+q)
			}
			if p.Retention.Age > 0 {
				vals = append(vals, keepField(q), p.Retention.spec())
			} else {
				unkept = append(unkept, keepField(q))
			}
			if p.FairWindow > 0 {
				// "|fair": some queue of the namespace is fair (move.lua
				// looks at keys' runs only then); never removed.
				vals = append(vals, fairField(q), p.FairWindow, anyFairField, 1)
			} else {
				unkept = append(unkept, fairField(q))
			}
			if p.KeyConcurrency > 0 {
				vals = append(vals, keyCapField(q), p.KeyConcurrency)
			} else {
				unkept = append(unkept, keyCapField(q))
			}
			if p.KeyRate.Rate > 0 {
				vals = append(vals, keyRateField(q), p.KeyRate.spec())
			} else {
				unkept = append(unkept, keyRateField(q))
			}
		}
		pipe.HSet(ctx, s.k.Queues(sh), vals...)
		if len(unkept) > 0 {
			pipe.HDel(ctx, s.k.Queues(sh), unkept...)
		}
		// The shard's layout marker, if it has none yet: enqueue.lua
		// declares it, and on a Redis Cluster a declared key that exists
		// nowhere stops the call while the slot migrates.
		pipe.SetNX(ctx, s.k.Marker(sh), marker, 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return errtext.Errorf("register queues: %w", err)
	}
	// Workers re-read the queues' retention when they hear it.
	_ = s.rdb.Publish(ctx, s.k.ControlChannel(), QueuesChanged).Err()
	return nil
}

// QueuesChanged is announced on the control channel when queues were
// registered (RegisterQueues): workers re-read which queues keep records
// of their ended tasks.
const QueuesChanged = "queues"

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

// Far-tier defaults (the schedulers' scheduler.far_bucket and far_lead)
// and the least values of a FarTier that is on.
const (
	DefaultFarBucket = time.Minute
	DefaultFarLead   = 15 * time.Second
	MinFarBucket     = time.Second
	MinFarLead       = time.Second
)

// Validate reports far-tier settings the scripts cannot use: Bucket 0
// (off), or Bucket at least MinFarBucket and Lead at least MinFarLead.
func (f FarTier) Validate() error {
	if f.Bucket < 0 || f.Lead < 0 || (f.Bucket > 0 && (f.Bucket < MinFarBucket || f.Lead < MinFarLead)) {
		return fmt.Errorf("%w: far tier bucket %s and lead %s (want 0, or at least %s and %s)", ErrInvalidArgument, f.Bucket, f.Lead, MinFarBucket, MinFarLead)
	}
	return nil
}

// SetFarTier records the far tier's settings in every shard. Turning it
// off affects new enqueues only: buckets already stored are promoted as
// usual.
func (s *Store) SetFarTier(ctx context.Context, f FarTier) error {
	if err := f.Validate(); err != nil {
		return err
	}
	pipe := s.rdb.Pipeline()
	for sh := 0; sh < s.Layout().Shards(); sh++ {
		if f.Bucket == 0 {
			pipe.HDel(ctx, s.k.Queues(sh), farField)
		} else {
			pipe.HSet(ctx, s.k.Queues(sh), farField, fmt.Sprintf("%d|%d", f.Bucket.Milliseconds(), f.Lead.Milliseconds()))
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return errtext.Errorf("set far tier: %w", err)
	}
	return nil
}

// farField is the field of the queues hash that holds the far tier's
// settings, "bucket_ms|lead_ms"; no queue name contains "|".
const farField = "|far"

// Registration is what the schedulers registered, as seen through this
// store's layout: it tells a worker or producer whose namespace, shard
// count or queues differ from the schedulers'.
type Registration struct {
	// Missing maps each queue asked about that is not registered in every
	// shard of the layout to the shards that lack it (all of them: no
	// scheduler registered it in this namespace; the last ones only: the
	// schedulers run fewer shards than this layout).
	Missing map[string][]int
	// Beyond reports that the shard after the layout's last one holds
	// registrations: the schedulers run more shards than this layout (or
	// an earlier deployment did).
	Beyond bool
	// Removed holds each queue asked about that was removed (inspect's
	// RemoveQueue) and still drains in some shard: it takes no new tasks.
	Removed map[string]bool
}

// Registration looks up the registration of queues in every shard (one
// pipelined round trip).
func (s *Store) Registration(ctx context.Context, queues []string) (Registration, error) {
	pipe := s.rdb.Pipeline()
	l := s.Layout()
	policies := make([][]*redis.StringCmd, l.Shards())
	for sh := range l.Shards() {
		for _, q := range queues {
			policies[sh] = append(policies[sh], pipe.HGet(ctx, s.k.Queues(sh), q))
		}
	}
	beyond := pipe.Exists(ctx, s.k.Queues(l.Existing()))
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return Registration{}, errtext.Errorf("registration: %w", err)
	}
	r := Registration{Missing: map[string][]int{}, Beyond: beyond.Val() > 0, Removed: map[string]bool{}}
	for sh, cmds := range policies {
		for i, c := range cmds {
			switch p, err := c.Result(); {
			case err == redis.Nil:
				r.Missing[queues[i]] = append(r.Missing[queues[i]], sh)
			case err != nil:
				return Registration{}, errtext.Errorf("registration: %w", err)
			case strings.HasPrefix(p, removedPrefix):
				r.Removed[queues[i]] = true
			}
		}
	}
	return r, nil
}

// Problem describes what r says about queue q, or "" if q is registered
// in every shard of a layout of n shards and namespace ns.
func (r Registration) Problem(q, ns string, n int) string {
	switch missing := r.Missing[q]; {
	case r.Removed[q]:
		return fmt.Sprintf("queue %q was removed (hourglass queue rm): it takes no new tasks while its stored ones drain", q)
	case len(missing) == n:
		return fmt.Sprintf("queue %q is not registered by any scheduler in namespace %q: check the schedulers' queues and namespace", q, ns)
	case len(missing) > 0:
		return fmt.Sprintf("queue %q is registered in %d of this process's %d shards only: the schedulers run fewer shards", q, n-len(missing), n)
	case r.Beyond:
		return fmt.Sprintf("shard %d has registered queues: the schedulers run more shards than this process's %d (or an earlier deployment did); tasks in those shards are not seen here", n, n)
	}
	return ""
}

// QueueNames returns the queues registered in shard 0, sorted, without
// the removed ones (one HGETALL). The schedulers register every queue in
// every shard and every layout has a shard 0, so these are the
// namespace's queues whatever this store's shard count: what a process
// whose queues are missing can be told does exist.
func (s *Store) QueueNames(ctx context.Context) ([]string, error) {
	all, err := s.rdb.HGetAll(ctx, s.k.Queues(0)).Result()
	if err != nil {
		return nil, errtext.Errorf("queue names: %w", err)
	}
	names := make([]string, 0, len(all))
	for q, p := range all {
		if ValidQueue(q) && !strings.HasPrefix(p, removedPrefix) { // not the far tier's field
			names = append(names, q)
		}
	}
	slices.Sort(names)
	return names, nil
}
