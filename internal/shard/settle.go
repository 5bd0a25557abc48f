package shard

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/hourglass-sched/hourglass/internal/errtext"
)

// Settling a delivery: ack (done), nack (failed), release (given back
// unrun), and extending its lease meanwhile. Delivery.AckArgs and
// Delivery.NackArgs build the arguments, so a worker never assembles
// them itself.

// Ack completes a delivery: the task is deleted. It returns an error
// wrapping ErrStaleToken when the delivery is no longer current.
func (s *Store) Ack(ctx context.Context, a AckArgs) error {
	return s.AckBatch(ctx, []AckArgs{a})[0]
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

// AckArgs returns what acknowledges d. unleased reports whether d still
// runs without a lease: true for a Popped delivery until it is claimed.
func (d Delivery) AckArgs(unleased bool) AckArgs {
	a := AckArgs{Shard: d.Shard, ID: d.Task.ID, Token: d.Token}
	if unleased {
		a.Queue = d.Task.Queue
	}
	return a
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
		args = append(args, s.k.PendingPrefix(sh))
		for _, i := range idx {
			args = append(args, acks[i].ID, acks[i].Token, acks[i].Queue)
		}
		calls = append(calls, scriptCall{keys: []string{s.k.Tasks(sh), s.k.Inflight(sh), s.k.Leases(sh), s.k.Errors(sh), s.k.Counts(sh)}, args: args})
		members = append(members, idx)
	}
	cmds, err := ackScript.runPipelinedOnce(ctx, s.rdb, calls)
	for c, idx := range members {
		var v []int64
		cerr := err
		if cerr == nil {
			v, cerr = cmds[c].Int64Slice()
		}
		for k, i := range idx {
			switch {
			case cerr != nil:
				out[i] = errtext.Errorf("ack %q: %w", acks[i].ID, cerr)
			case k >= len(v) || v[k] == 0:
				out[i] = fmt.Errorf("%w: ack %q", ErrStaleToken, acks[i].ID)
			}
		}
	}
	return out
}

// Succeed acknowledges one delivery of a queue that keeps records of its
// ended tasks (Retention): the task is recorded as succeeded with result
// for the queue's retention and its final state is published on its
// done channel (lua/succeed.lua). A queue that keeps no records (any
// more) is acknowledged as by Ack, the result dropped. It returns an error wrapping ErrStaleToken if the delivery is
// no longer current.
func (s *Store) Succeed(ctx context.Context, a AckArgs, result []byte) error {
	sh := a.Shard
	n, err := succeedScript.Run(ctx, s.rdb,
		[]string{s.k.Tasks(sh), s.k.Inflight(sh), s.k.Leases(sh), s.k.Errors(sh), s.k.Counts(sh), s.k.Queues(sh)},
		s.k.PendingPrefix(sh), a.ID, a.Token, a.Queue, result, s.k.Ended(sh), s.k.EndedIndexPrefix(sh), s.k.DonePrefix()).Int64()
	if err != nil {
		return errtext.Errorf("ack %q: %w", a.ID, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: ack %q", ErrStaleToken, a.ID)
	}
	return nil
}

// Keys returns the names of the store's keys and channels.
func (s *Store) Keys() Keys { return s.k }

// Extend moves the lease deadline of the leased delivery d to lease after
// Redis's now and returns it.
func (s *Store) Extend(ctx context.Context, d Delivery, lease time.Duration) (time.Time, error) {
	sh, id := d.Shard, d.Task.ID
	ms, err := extendScript.Run(ctx, s.rdb, []string{s.k.Inflight(sh), s.k.Leases(sh)}, id, d.Token, lease.Milliseconds()).Int64()
	if err != nil {
		return time.Time{}, errtext.Errorf("extend %q: %w", id, err)
	}
	if ms == 0 {
		return time.Time{}, fmt.Errorf("%w: extend %q", ErrStaleToken, id)
	}
	return time.UnixMilli(ms), nil
}

// NackArgs describe a failed delivery.
type NackArgs struct {
	// Shard, ID and Token identify the delivery.
	Shard     int
	ID, Token string
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
	// TraceLink, when set, is the id of the failed attempt in its trace
	// (16 hex digits): a traced task keeps it as its Task.TraceLink, and
	// its next attempt links to it (docs/protocol.md, "Traces").
	TraceLink string
}

// NackArgs returns what fails d with the error text errText, retrying it
// after the queue's backoff with a fresh jitter; set Dead, RetryAfter or
// Backoff on the result to change that. unleased is as for AckArgs.
func (d Delivery) NackArgs(unleased bool, errText string) NackArgs {
	a := d.AckArgs(unleased)
	return NackArgs{Shard: a.Shard, ID: a.ID, Token: a.Token, Queue: a.Queue, Err: errText, Rand: rand.Float64()}
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

// Nack fails a delivery: the task is rescheduled with backoff (or after
// RetryAfter), or buried when it asked not to retry or has no retries
// left.
func (s *Store) Nack(ctx context.Context, a NackArgs) (NackResult, error) {
	sh, id := a.Shard, a.ID
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
		s.k.Delayed(sh), s.k.Tasks(sh), s.k.Inflight(sh), s.k.Leases(sh), s.k.Errors(sh),
		s.k.Dead(sh), s.k.DeadInfo(sh), s.k.Queues(sh), s.k.Counts(sh),
	}
	if a.Queue != "" {
		keys = append(keys, s.k.Pending(sh, a.Queue))
	}
	v, err := nackScript.Run(ctx, s.rdb, keys, id, a.Token, a.Err, mode, retryAfter, backoff, strconv.FormatFloat(a.Rand, 'f', 6, 64), s.k.WakeChannel(sh), s.k.DonePrefix(), a.TraceLink).Int64Slice()
	if err != nil {
		return NackResult{}, errtext.Errorf("nack %q: %w", id, err)
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

// Release gives the delivery d back without counting an attempt; the task
// is ready again at once (at the end of its ready list). It takes leased
// and Unleased deliveries alike.
func (s *Store) Release(ctx context.Context, d Delivery) error {
	sh, id, queue := d.Shard, d.Task.ID, d.Task.Queue
	n, err := releaseScript.Run(ctx, s.rdb, []string{
		s.k.Inflight(sh), s.k.Leases(sh), s.k.Seq(sh), s.k.Pending(sh, queue), s.k.Ready(sh, queue), s.k.Tasks(sh), s.k.Counts(sh),
	}, id, d.Token).Int64()
	if err != nil {
		return errtext.Errorf("release %q: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: release %q", ErrStaleToken, id)
	}
	return nil
}
