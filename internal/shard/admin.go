package shard

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/errtext"
)

// Administration: depths, the queue registry, pause and resume. The
// listing and dead-letter scripts are in page.go.

// QueueDepth is one queue's task counts in one shard (depth.lua).
type QueueDepth struct {
	Queue string
	// Policy is the registered policy; Registered is false for a queue
	// only the counts name (its registration is gone, or "" for dead data
	// that names no queue); Removed marks a queue removed and draining.
	Policy     QueuePolicy
	Registered bool
	Removed    bool
	// Scheduled (far tier included), Ready (in the ready list), Leased,
	// Popped (taken by a worker, not leased yet) and Dead. Counters that
	// hand edits drove below zero read as zero.
	Scheduled, Ready, Leased, Popped, Dead int64
	// OldestReady is the due time of the task that has waited longest in
	// the ready list (its head); zero when it is empty.
	OldestReady time.Time
}

// Depth returns the task counts of every queue in each of shards (one
// pipelined round trip, one bounded script call per shard), in the order
// of shards. Shards that answer with an error reply (a key of the wrong
// type) are left nil and reported by a *PartialError, with the others
// read.
func (s *Store) Depth(ctx context.Context, shards []int) ([][]QueueDepth, error) {
	calls := make([]scriptCall, len(shards))
	for i, sh := range shards {
		calls[i] = scriptCall{keys: []string{s.k.Counts(sh), s.k.Queues(sh)}, args: []any{s.k.ReadyPrefix(sh), s.k.PendingPrefix(sh)}}
	}
	cmds, err := depthScript.runPipelined(ctx, s.rdb, calls)
	if err != nil {
		return nil, err
	}
	out := make([][]QueueDepth, len(shards))
	var bad partial
	for i, c := range cmds {
		v, err := c.Slice()
		if err == nil {
			out[i], err = parseDepth(v)
			if err != nil {
				err = fmt.Errorf("%w: %w", errBadReply, err)
			}
		}
		if err != nil && !bad.add(shards[i], err) {
			return nil, errtext.Errorf("depth of shard %d: %w", shards[i], err)
		}
	}
	return out, bad.err()
}

// errBadReply is a reply a reader cannot parse: like an error reply, it
// makes the shard's part of a read fail, not the whole read.
var errBadReply = redisError("hourglass: unexpected reply")

// redisError is an error that counts as a Redis error reply
// (redis.Error).
type redisError string

func (e redisError) Error() string { return string(e) }

// RedisError marks it as a reply.
func (redisError) RedisError() {}

func parseDepth(v []any) ([]QueueDepth, error) {
	const per = 8
	if len(v)%per != 0 {
		return nil, fmt.Errorf("unexpected reply of %d values", len(v))
	}
	out := make([]QueueDepth, 0, len(v)/per)
	for i := 0; i < len(v); i += per {
		name, _ := v[i].(string)
		raw, _ := v[i+1].(string)
		d := QueueDepth{Queue: name}
		if raw != "" {
			d.Registered = true
			var rest string
			rest, d.Removed = strings.CutPrefix(raw, removedPrefix)
			if p, err := DecodePolicy(rest); err == nil {
				d.Policy = p
			}
		}
		n := func(k int) int64 { x, _ := v[i+k].(int64); return max(0, x) }
		d.Scheduled, d.Ready, d.Leased, d.Popped, d.Dead = n(2), n(3), n(4), n(5), n(6)
		if ms, _ := v[i+7].(int64); ms >= 0 && d.Ready > 0 {
			d.OldestReady = time.UnixMilli(ms)
		}
		out = append(out, d)
	}
	return out, nil
}

// removedPrefix marks a removed queue's policy in the registry.
const removedPrefix = "drain|"

// DecodePolicy parses a policy as the registry stores it,
// "max_retries|timeout_ms|max_payload|base_ms|cap_ms|factor".
func DecodePolicy(s string) (QueuePolicy, error) {
	f := strings.Split(s, "|")
	if len(f) != 6 {
		return QueuePolicy{}, fmt.Errorf("%w: policy %q", ErrInvalidArgument, s)
	}
	var n [5]int64
	for i := range n {
		x, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return QueuePolicy{}, fmt.Errorf("%w: policy %q", ErrInvalidArgument, s)
		}
		n[i] = x
	}
	factor, err := strconv.ParseFloat(f[5], 64)
	if err != nil {
		return QueuePolicy{}, fmt.Errorf("%w: policy %q", ErrInvalidArgument, s)
	}
	return QueuePolicy{
		MaxRetries: int(n[0]), Timeout: time.Duration(n[1]) * time.Millisecond, MaxPayload: n[2],
		Backoff: Backoff{Base: time.Duration(n[3]) * time.Millisecond, Cap: time.Duration(n[4]) * time.Millisecond, Factor: factor},
	}, nil
}

// Validate reports a policy the scripts cannot use.
func (p QueuePolicy) Validate() error {
	switch {
	case p.MaxRetries < 0 || p.MaxRetries > MaxRetriesLimit:
		return fmt.Errorf("%w: max retries %d not in 0..%d", ErrInvalidArgument, p.MaxRetries, MaxRetriesLimit)
	case p.Timeout < MinTimeout:
		return fmt.Errorf("%w: timeout %s below %s", ErrInvalidArgument, p.Timeout, MinTimeout)
	case p.MaxPayload < 1 || p.MaxPayload > MaxPayloadLimit:
		return fmt.Errorf("%w: max payload %d not in 1..%d", ErrInvalidArgument, p.MaxPayload, MaxPayloadLimit)
	}
	return p.Backoff.Validate()
}

// SetQueue registers queue with policy p in every shard, or changes its
// policy (a removed queue becomes active again). It reports whether the
// queue was new (or removed) in any shard.
func (s *Store) SetQueue(ctx context.Context, queue string, p QueuePolicy) (bool, error) {
	if !ValidQueue(queue) {
		return false, fmt.Errorf("%w: queue name %q", ErrInvalidArgument, queue)
	}
	if err := p.Validate(); err != nil {
		return false, err
	}
	// A queue added at run time gets its number, as at registration, when
	// the namespace writes encoding version 2.
	_, ids, err := s.internQueues(ctx, []string{queue})
	if err != nil {
		return false, err
	}
	v, err := s.registry(ctx, "set", queue, p.encode(), ids[queue])
	if err != nil {
		return false, err
	}
	return slicesContain(v, 1), nil
}

// RemoveQueue marks queue removed in every shard: enqueues to it are
// refused, and each shard's owner deletes its registration once its tasks
// in that shard are gone. It returns ErrNotFound when no shard has it
// registered.
func (s *Store) RemoveQueue(ctx context.Context, queue string) error {
	if !ValidQueue(queue) {
		return fmt.Errorf("%w: queue name %q", ErrInvalidArgument, queue)
	}
	v, err := s.registry(ctx, "remove", queue, "")
	if err != nil {
		return err
	}
	if !slicesContain(v, 1) && !slicesContain(v, 2) {
		return fmt.Errorf("%w: queue %q is not registered", ErrNotFound, queue)
	}
	return nil
}

// registry runs registry.lua on every shard (one pipelined round trip);
// number, if not "", is the queue's interned number ("set").
func (s *Store) registry(ctx context.Context, op, queue, policy string, number ...string) ([]int64, error) {
	args := []any{op, queue, policy}
	if len(number) == 1 && number[0] != "" {
		args = append(args, number[0])
	}
	calls := make([]scriptCall, s.Layout().Existing())
	for sh := range calls {
		calls[sh] = scriptCall{keys: []string{s.k.Queues(sh)}, args: args}
	}
	cmds, err := registryScript.runPipelined(ctx, s.rdb, calls)
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(cmds))
	for sh, c := range cmds {
		if out[sh], err = c.Int64(); err != nil {
			return nil, errtext.Errorf("%s queue %q in shard %d: %w", op, queue, sh, err)
		}
	}
	return out, nil
}

func slicesContain(v []int64, x int64) bool {
	for _, y := range v {
		if y == x {
			return true
		}
	}
	return false
}

// SetPaused pauses (paused true) or resumes queue for the deployment and
// announces it on the control channel. It reports whether the state
// changed.
func (s *Store) SetPaused(ctx context.Context, queue string, paused bool) (bool, error) {
	if !ValidQueue(queue) {
		return false, fmt.Errorf("%w: queue name %q", ErrInvalidArgument, queue)
	}
	op := "resume"
	if paused {
		op = "pause"
	}
	n, err := pauseScript.Run(ctx, s.rdb, []string{s.k.Paused()}, op, queue, s.k.ControlChannel()).Int64()
	if err != nil {
		return false, errtext.Errorf("%s queue %q: %w", op, queue, err)
	}
	return n == 1, nil
}

// Paused returns the paused queues and when each was paused. It reads one
// hash of at most two fields per queue (Controls).
func (s *Store) Paused(ctx context.Context) (map[string]time.Time, error) {
	c, err := s.Controls(ctx)
	return c.Paused, err
}

// StoredEpochs returns the fencing epoch each shard's scripts last
// recorded (0: none yet), in shard order: one pipelined GET per shard.
// A shard whose epoch key is not a number (or not a string) reads 0 and
// is reported by a *PartialError.
func (s *Store) StoredEpochs(ctx context.Context) ([]int64, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, s.Layout().Existing())
	for sh := range cmds {
		cmds[sh] = pipe.Get(ctx, s.k.Epoch(sh))
	}
	_, _ = pipe.Exec(ctx)
	out := make([]int64, len(cmds))
	var bad partial
	for sh, c := range cmds {
		v, err := c.Result()
		if err == redis.Nil {
			continue
		}
		if err == nil {
			if out[sh], err = strconv.ParseInt(v, 10, 64); err != nil {
				// The next fenced call overwrites it (lib.lua's fence).
				err = fmt.Errorf("%w: corrupt epoch %q", errBadReply, v)
			}
		}
		if err != nil && !bad.add(sh, err) {
			return nil, errtext.Errorf("stored epoch of shard %d: %w", sh, err)
		}
	}
	return out, bad.err()
}

// namespaceScanCount is the COUNT of each SCAN of Namespaces.
const namespaceScanCount = 1000

// Namespaces returns the namespaces that have queues registered on rdb,
// sorted, found by a SCAN of each node (each primary of a Redis Cluster)
// for the queue registry of shard 0, examining at most budget keys per
// node. complete is false when a node held more keys than that and the
// scan stopped before its end (the namespaces found so far are
// returned). It is for a hint to a person (an empty namespace: which
// ones are in use?), not for a program: SCAN sees every key name, so a
// user limited to its namespace's keys (ACLUsers' admin) has no SCAN
// and gets Redis's NOPERM error.
func Namespaces(ctx context.Context, rdb redis.UniversalClient, budget int) (names []string, complete bool, err error) {
	var (
		mu    sync.Mutex
		found = map[string]bool{}
	)
	complete = true
	scan := func(ctx context.Context, c redis.Cmdable) error {
		var cursor uint64
		for examined := 0; ; examined += namespaceScanCount {
			if examined >= budget {
				mu.Lock()
				complete = false
				mu.Unlock()
				return nil
			}
			keys, next, err := c.Scan(ctx, cursor, queuesOfShard0, namespaceScanCount).Result()
			if err != nil {
				return err
			}
			mu.Lock()
			for _, key := range keys {
				if ns, ok := namespaceOfQueues(key); ok {
					found[ns] = true
				}
			}
			mu.Unlock()
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, rdb)
	}
	if err != nil {
		return nil, false, errtext.Errorf("find the namespaces in use: %w", err)
	}
	return slices.Sorted(maps.Keys(found)), complete, nil
}
