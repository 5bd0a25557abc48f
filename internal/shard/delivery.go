package shard

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ReadyKeys returns the ready lists of the given queues in every shard,
// in shard order; workers block on them with Pop.
func (l Layout) ReadyKeys(queues []string) []string {
	keys := make([]string, 0, l.shards*len(queues))
	for sh := 0; sh < l.shards; sh++ {
		for _, q := range queues {
			keys = append(keys, l.Ready(sh, q))
		}
	}
	return keys
}

// ParseReady returns the shard and queue of a ready-list key.
func (l Layout) ParseReady(key string) (sh int, queue string, ok bool) {
	rest, ok := strings.CutPrefix(key, "{"+l.ns+":")
	if !ok {
		return 0, "", false
	}
	num, q, ok := strings.Cut(rest, "}:ready:")
	if !ok {
		return 0, "", false
	}
	sh, err := strconv.Atoi(num)
	if err != nil || sh < 0 || sh >= l.shards {
		return 0, "", false
	}
	return sh, q, true
}

// Pop blocks up to timeout for entries in any of keys (BLMPOP, from the
// first non-empty key in the order given) and pops at most count of them
// from one list. It returns the list's key and the entries; none on
// timeout. Each entry is a delivery: run it at once with Popped (its
// token is then the entry's number), or lease it first with Claim. An
// entry popped and neither settled nor leased (the worker crashed) is
// found and taken back by Recover (a failed attempt), no sooner than
// UnleasedGrace after the pop.
func (s *Store) Pop(ctx context.Context, keys []string, count int, timeout time.Duration) (string, []string, error) {
	key, ids, err := s.rdb.BLMPop(ctx, timeout, "LEFT", int64(count), keys...).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, fmt.Errorf("shard: pop: %w", err)
	}
	return key, ids, nil
}

// UnleasedGrace is the shortest time for which a task popped from a ready
// list and not leased stays with the worker that popped it: recovery takes
// it back (counting a failed attempt) only once it has seen it popped and
// unleased at two checks this far apart. A worker that runs popped tasks
// before leasing them must lease (Claim) those still running well within
// this time.
const UnleasedGrace = time.Second

// MaxPrefetch bounds how far ahead of their due time tasks are moved
// (MoveAhead). A worker holds such a task, popped and unleased, until it
// is due, so the hold, plus the time a worker runs a task before leasing
// it, must stay well within UnleasedGrace.
const MaxPrefetch = 250 * time.Millisecond

// Popped decodes a ready-list entry "seq|id|task" of shard sh into a
// delivery that may run at once, before any lease: its Token is the
// entry's number, which acks, nacks and releases present together with
// the queue (AckArgs.Queue, NackArgs.Queue). It reports false for an
// entry it cannot use so (no task part, an entry of the older form
// "seq|id", or task data this binary cannot decode): Claim decides those.
// Leased is the local time now; Deadline is Leased plus lease, or the
// task's timeout when lease is not positive.
func Popped(sh int, entry string, lease time.Duration) (Delivery, bool) {
	seq, rest, ok := strings.Cut(entry, "|")
	if _, err := strconv.ParseUint(seq, 10, 64); !ok || err != nil {
		return Delivery{}, false
	}
	id, blob, ok := strings.Cut(rest, "|")
	if !ok || !ValidID(id) {
		return Delivery{}, false
	}
	t, err := Decode(id, []byte(blob))
	if err != nil {
		return Delivery{}, false
	}
	if lease <= 0 {
		lease = t.Timeout
	}
	now := time.Now()
	return Delivery{Task: t, Shard: sh, Token: seq, Unleased: true, Leased: now, Deadline: now.Add(lease)}, true
}

// EntryRef returns the "seq|id" part of a ready-list entry, what Claim
// needs of it.
func EntryRef(entry string) string {
	if i := strings.IndexByte(entry, '|'); i >= 0 {
		if j := strings.IndexByte(entry[i+1:], '|'); j >= 0 {
			return entry[:i+1+j]
		}
	}
	return entry
}

// Delivery is a task leased to a worker.
type Delivery struct {
	Task  Task
	Shard int
	// DecodeErr is set when the leased data cannot be decoded here (a
	// newer encoding than this binary knows); Task then holds only ID and
	// Queue. The delivery should be failed without retry.
	DecodeErr error
	// Token identifies this delivery; ack, nack, extend and release must
	// present it.
	Token string
	// Unleased marks a delivery from Popped: it runs on its popped entry,
	// with no lease yet (see UnleasedGrace).
	Unleased bool
	// Leased is Redis time at the claim; Deadline is when the lease ends
	// unless extended (Redis time). For an Unleased delivery both are
	// local times: the pop, and when a lease taken then would end.
	Leased, Deadline time.Time
}

// Ref is the "seq|id" reference Claim takes for an Unleased delivery's
// entry (what EntryRef returns for it).
func (d Delivery) Ref() string { return d.Token + "|" + d.Task.ID }

// Claim leases entries popped from shard sh's ready list of queue. lease
// overrides each task's own timeout when positive. Entries whose id is no
// longer pending under that entry (cancelled, or a leftover duplicate) are
// skipped; ids whose data cannot be decoded are buried. The deliveries are
// in pop order.
func (s *Store) Claim(ctx context.Context, sh int, queue string, entries []string, lease time.Duration) ([]Delivery, error) {
	args := make([]any, 0, len(entries)+1)
	if lease > 0 {
		args = append(args, lease.Milliseconds())
	} else {
		args = append(args, "")
	}
	for _, e := range entries {
		args = append(args, e)
	}
	v, err := claimScript.Run(ctx, s.rdb, []string{
		s.l.Tasks(sh), s.l.Inflight(sh), s.l.Leases(sh),
		s.l.Pending(sh, queue), s.l.Dead(sh), s.l.DeadInfo(sh),
	}, args...).Slice()
	if err != nil {
		return nil, fmt.Errorf("shard: claim on shard %d: %w", sh, err)
	}
	if len(v) < 1 || (len(v)-1)%4 != 0 {
		return nil, fmt.Errorf("shard: claim on shard %d: unexpected reply of %d elements", sh, len(v))
	}
	now, _ := v[0].(int64)
	out := make([]Delivery, 0, (len(v)-1)/4)
	for i := 1; i < len(v); i += 4 {
		id, _ := v[i].(string)
		token, _ := v[i+1].(string)
		deadline, _ := v[i+2].(int64)
		blob, _ := v[i+3].(string)
		d := Delivery{Shard: sh, Token: token, Leased: time.UnixMilli(now), Deadline: time.UnixMilli(deadline)}
		// The script read only the lease's fields; Go's decoder may still
		// refuse the rest (a newer encoding, a number out of range):
		// report, don't drop.
		if d.Task, d.DecodeErr = Decode(id, []byte(blob)); d.DecodeErr != nil {
			d.Task = Task{ID: id, Queue: queue}
		}
		out = append(out, d)
	}
	return out, nil
}

// Ack completes a delivery on shard sh (Delivery.Shard): the task is
// deleted. It returns an error wrapping ErrStaleToken when the delivery is
// no longer current.
func (s *Store) Ack(ctx context.Context, sh int, id, token string) error {
	return s.AckBatch(ctx, []AckArgs{{Shard: sh, ID: id, Token: token}})[0]
}

// AckArgs identify one delivery to acknowledge.
type AckArgs struct {
	Shard     int
	ID, Token string
	// Queue is set for a delivery run without a lease (Delivery.Unleased):
	// its token is then looked up among the queue's pending ids, and among
	// the leases if the delivery was leased meanwhile.
	Queue string
}

// AckBatch acknowledges many deliveries in one pipelined round trip, one
// script call per shard. Each error is nil, wraps ErrStaleToken, or is the
// Redis error of its call.
func (s *Store) AckBatch(ctx context.Context, acks []AckArgs) []error {
	out := make([]error, len(acks))
	byShard := map[int][]int{}
	for i, a := range acks {
		byShard[a.Shard] = append(byShard[a.Shard], i)
	}
	var calls []scriptCall
	var members [][]int
	for sh, idx := range byShard {
		args := make([]any, 0, 1+3*len(idx))
		args = append(args, s.l.PendingPrefix(sh))
		for _, i := range idx {
			args = append(args, acks[i].ID, acks[i].Token, acks[i].Queue)
		}
		calls = append(calls, scriptCall{keys: []string{s.l.Tasks(sh), s.l.Inflight(sh), s.l.Leases(sh), s.l.Errors(sh)}, args: args})
		members = append(members, idx)
	}
	cmds, err := ackScript.runPipelined(ctx, s.rdb, calls)
	for c, idx := range members {
		var v []int64
		cerr := err
		if cerr == nil {
			v, cerr = cmds[c].Int64Slice()
		}
		for k, i := range idx {
			switch {
			case cerr != nil:
				out[i] = fmt.Errorf("shard: ack %q: %w", acks[i].ID, cerr)
			case k >= len(v) || v[k] == 0:
				out[i] = fmt.Errorf("%w: ack %q", ErrStaleToken, acks[i].ID)
			}
		}
	}
	return out
}

// Extend moves a delivery's lease deadline (shard sh) to lease after
// Redis's now.
func (s *Store) Extend(ctx context.Context, sh int, id, token string, lease time.Duration) (time.Time, error) {
	ms, err := extendScript.Run(ctx, s.rdb, []string{s.l.Inflight(sh), s.l.Leases(sh)}, id, token, lease.Milliseconds()).Int64()
	if err != nil {
		return time.Time{}, fmt.Errorf("shard: extend %q: %w", id, err)
	}
	if ms == 0 {
		return time.Time{}, fmt.Errorf("%w: extend %q", ErrStaleToken, id)
	}
	return time.UnixMilli(ms), nil
}

// NackArgs describe a failed delivery.
type NackArgs struct {
	// Err is kept as the task's last error.
	Err string
	// Dead sends the task to the dead-letter set without retrying.
	Dead bool
	// RetryAfter, when positive, replaces the backoff delay.
	RetryAfter time.Duration
	// Backoff overrides the queue's registered backoff when non-zero.
	Backoff Backoff
	// Rand in [0,1) is the backoff's jitter.
	Rand float64
	// Queue is set for a delivery run without a lease (Delivery.Unleased),
	// as in AckArgs.
	Queue string
}

// NackResult is what became of a failed delivery.
type NackResult struct {
	// Dead reports that the task went to the dead-letter set.
	Dead bool
	// Due is the retry's due time when not Dead.
	Due time.Time
	// Attempts counts the failed deliveries, this one included.
	Attempts int
}

// Nack fails a delivery on shard sh: the task is rescheduled with backoff
// (or after RetryAfter), or buried when it asked not to retry or has no
// retries left.
func (s *Store) Nack(ctx context.Context, sh int, id, token string, a NackArgs) (NackResult, error) {
	mode := "retry"
	if a.Dead {
		mode = "dead"
	}
	retryAfter, backoff := "", ""
	if a.RetryAfter > 0 {
		retryAfter = strconv.FormatInt(a.RetryAfter.Milliseconds(), 10)
	}
	if a.Backoff != (Backoff{}) {
		backoff = a.Backoff.spec()
	}
	keys := []string{
		s.l.Delayed(sh), s.l.Tasks(sh), s.l.Inflight(sh), s.l.Leases(sh), s.l.Errors(sh),
		s.l.Dead(sh), s.l.DeadInfo(sh), s.l.Queues(sh),
	}
	if a.Queue != "" {
		keys = append(keys, s.l.Pending(sh, a.Queue))
	}
	v, err := nackScript.Run(ctx, s.rdb, keys, id, token, a.Err, mode, retryAfter, backoff, strconv.FormatFloat(a.Rand, 'f', 6, 64), s.l.WakeChannel(sh)).Int64Slice()
	if err != nil {
		return NackResult{}, fmt.Errorf("shard: nack %q: %w", id, err)
	}
	switch v[0] {
	case 0:
		return NackResult{}, fmt.Errorf("%w: nack %q", ErrStaleToken, id)
	case 1:
		return NackResult{Due: time.UnixMilli(v[1]), Attempts: int(v[2])}, nil
	case 2:
		return NackResult{Dead: true, Attempts: int(v[2])}, nil
	default:
		return NackResult{Dead: true}, fmt.Errorf("%w: nack %q: buried", ErrUndecodable, id)
	}
}

// Release gives a delivery on shard sh back without counting an attempt;
// the task is ready again at once (at the end of its ready list). It
// takes leased and Unleased deliveries alike.
func (s *Store) Release(ctx context.Context, sh int, id, queue, token string) error {
	n, err := releaseScript.Run(ctx, s.rdb, []string{
		s.l.Inflight(sh), s.l.Leases(sh), s.l.Seq(sh), s.l.Pending(sh, queue), s.l.Ready(sh, queue), s.l.Tasks(sh),
	}, id, token).Int64()
	if err != nil {
		return fmt.Errorf("shard: release %q: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: release %q", ErrStaleToken, id)
	}
	return nil
}
