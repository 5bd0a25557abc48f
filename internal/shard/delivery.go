package shard

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/errtext"
)

// Pop blocks up to timeout for entries in any of keys (BLMPOP, from the
// first non-empty key in the order given) and pops at most count of them
// from one list. It returns the list's key and the entries; none on
// timeout. Each entry is a delivery: run it at once with Popped (its
// token is then the entry's number), or lease it first with Claim. An
// entry popped and neither settled nor leased (the worker crashed) is
// found and taken back by Recover (a failed attempt), no sooner than
// UnleasedGrace after the pop.
func (s *Store) Pop(ctx context.Context, keys []string, count int, timeout time.Duration) (string, []string, error) {
	return s.PopOn(ctx, s.rdb, keys, count, timeout)
}

// PopOn is Pop on conn, a connection of the store's client set aside for
// blocking pops (redis.Client.Conn): its CLIENT ID, read once, lets
// another connection end a pop in flight with CLIENT UNBLOCK (Unblock).
func (s *Store) PopOn(ctx context.Context, conn redis.Cmdable, keys []string, count int, timeout time.Duration) (string, []string, error) {
	key, ids, err := conn.BLMPop(ctx, timeout, "LEFT", int64(count), keys...).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, errtext.Errorf("pop: %w", err)
	}
	return key, ids, nil
}

// Unblock ends the blocking pop of the connection with CLIENT ID id as
// if its timeout had passed (CLIENT UNBLOCK ... TIMEOUT): it returns
// nothing, and entries it had already popped still reach it. It reports
// whether a pop was blocked there.
func (s *Store) Unblock(ctx context.Context, id int64) (bool, error) {
	n, err := s.rdb.ClientUnblock(ctx, id).Result()
	if err != nil {
		return false, errtext.Errorf("unblock pop: %w", err)
	}
	return n == 1, nil
}

// PopNodeResult is what PopNode found: the entries of one list, or the
// keys it could not pop.
type PopNodeResult struct {
	// Key and Entries: the first list in the order given that had
	// entries, and at most count of them; "" and none when every list
	// was empty.
	Key     string
	Entries []string
	// NonLocal are keys the node no longer serves (their slot moved or is
	// being migrated): look them up on their new node.
	NonLocal []string
	// Failed are other keys whose pop failed (a key of another type
	// written by hand), with Redis's error: skipped.
	Failed map[string]string
}

// nonLocalErr is the start of the error a Redis Cluster node gives a
// script that touches a key of a slot it does not serve.
const nonLocalErr = "ERR Script attempted to access a non local key"

// PopNode pops at most count entries from the first non-empty list of
// keys, ready lists that one Redis Cluster node serves, in several slots
// (popnode.lua). It does not block: when every list is empty the caller
// waits for a ready announcement (Layout.ReadyChannel) and calls again.
// The entries are used as Pop's are.
func (s *Store) PopNode(ctx context.Context, keys []string, count int) (PopNodeResult, error) {
	if len(keys) == 0 {
		return PopNodeResult{}, nil
	}
	args := make([]any, 0, 1+len(keys))
	args = append(args, count)
	for _, k := range keys {
		args = append(args, k)
	}
	v, err := popNodeScript.Run(ctx, s.rdb, keys[:1], args...).Slice()
	if err != nil {
		return PopNodeResult{}, errtext.Errorf("pop: %w", err)
	}
	return parsePopNode(v)
}

func parsePopNode(v []any) (PopNodeResult, error) {
	var r PopNodeResult
	if len(v) < 2 || len(v)%2 != 0 {
		return r, errtext.Errorf("pop: unexpected reply of %d values", len(v))
	}
	key, ok1 := v[0].(string)
	entries, ok2 := v[1].([]any)
	if !ok1 || !ok2 {
		return r, errtext.Errorf("pop: unexpected reply %v", v[:2])
	}
	r.Key = key
	for _, e := range entries {
		if s, ok := e.(string); ok {
			r.Entries = append(r.Entries, s)
		}
	}
	for i := 2; i+1 < len(v); i += 2 {
		k, _ := v[i].(string)
		why, _ := v[i+1].(string)
		if strings.HasPrefix(why, nonLocalErr) {
			r.NonLocal = append(r.NonLocal, k)
			continue
		}
		if r.Failed == nil {
			r.Failed = map[string]string{}
		}
		r.Failed[k] = why
	}
	return r, nil
}

// Popped decodes a ready-list entry "seq|id|task" of shard sh into a
// delivery that may run at once, before any lease: its Token is the
// entry's number, which acks, nacks and releases present together with
// the queue (AckArgs.Queue, NackArgs.Queue). It reports false for an
// entry it cannot use so (no task part, an entry of the older form
// "seq|id", or task data this binary cannot decode): Claim decides those.
// Leased is poppedAt, the local time the pop was sent: the entry may have
// left the list at any time after it, and UnleasedGrace counts from then
// at the earliest (a reply read late, by a paused process, says nothing
// about when Redis popped it). Deadline is Leased plus lease, or the
// task's timeout when lease is not positive.
func (s *Store) Popped(sh int, entry string, poppedAt time.Time, lease time.Duration) (Delivery, bool) {
	seq, rest, ok := strings.Cut(entry, "|")
	if _, err := strconv.ParseUint(seq, 10, 64); !ok || err != nil {
		return Delivery{}, false
	}
	id, blob, ok := strings.Cut(rest, "|")
	if !ok || !ValidStoredID(id) {
		return Delivery{}, false
	}
	t, err := s.DecodeIn(sh, id, []byte(blob))
	if err != nil {
		return Delivery{}, false
	}
	if lease <= 0 {
		lease = t.Timeout
	}
	return Delivery{Task: t, Shard: sh, Token: seq, Unleased: true, Leased: poppedAt, Deadline: poppedAt.Add(lease)}, true
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
	// Queue. The delivery should be failed without retry when it wraps
	// ErrUndecodable; otherwise (the queue's name could not be read) the
	// data may be fine, and the delivery is failed as an attempt.
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
		s.k.Tasks(sh), s.k.Inflight(sh), s.k.Leases(sh),
		s.k.Pending(sh, queue), s.k.Dead(sh), s.k.DeadInfo(sh), s.k.Counts(sh),
	}, args...).Slice()
	if err != nil {
		return nil, errtext.Errorf("claim on shard %d: %w", sh, err)
	}
	if len(v) < 1 || (len(v)-1)%4 != 0 {
		return nil, errtext.Errorf("claim on shard %d: unexpected reply of %d elements", sh, len(v))
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
		if d.Task, d.DecodeErr = s.DecodeIn(sh, id, []byte(blob)); d.DecodeErr != nil {
			d.Task = Task{ID: id, Queue: queue}
		}
		out = append(out, d)
	}
	return out, nil
}
