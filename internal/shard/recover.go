package shard

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/hourglass-sched/hourglass/internal/errtext"
)

// RecoverArgs configure one recovery pass.
type RecoverArgs struct {
	// Limit bounds each part of the pass (expired leases, stranded
	// candidates, dead-letter trimming).
	Limit int
	// Candidates are the stranded candidates the previous pass returned.
	Candidates []string
	// DeadMaxSize and DeadMaxAge bound the dead-letter set; 0 means none.
	DeadMaxSize int
	DeadMaxAge  time.Duration
}

// QueueFailures are the failed attempts of one queue in a recovery pass:
// rescheduled with backoff, or buried.
type QueueFailures struct {
	Queue           string
	Retried, Buried int
}

// RecoverResult is the outcome of one recovery pass.
type RecoverResult struct {
	Retried     int // expired leases rescheduled
	Buried      int // expired leases, and scheduled tasks with a corrupt due time (ValidDue), dead-lettered
	Redelivered int // stranded ids (popped, never settled or leased) rescheduled or buried
	Trimmed     int // dead-letter entries deleted by retention
	// Expired counts records of ended tasks deleted past their queue's
	// retention (Retention).
	Expired int
	// NextDeadline is the earliest lease deadline (unix ms), -1 if none.
	NextDeadline int64
	// NextExpiry is when the earliest record of an ended task left
	// expires (unix ms), -1 if none: a shard that holds records is still
	// idle, but its pass wakes for them.
	NextExpiry int64
	// Pending counts ready ids not yet leased.
	Pending int
	// Now is Redis time of the pass (unix ms).
	Now int64
	// Failed are the failed attempts (Retried, Buried and the
	// Redelivered among them) per queue, for the queue history.
	Failed []QueueFailures
	// Candidates are ids that looked popped and unleased; pass them to
	// the next pass.
	Candidates []string
}

// Recover runs one fenced recovery pass on shard sh; see lua/recover.lua.
// It returns an error wrapping ErrStaleEpoch when a newer owner fenced
// the shard.
func (s *Store) Recover(ctx context.Context, sh int, epoch int64, a RecoverArgs) (RecoverResult, error) {
	args := []any{epoch, a.Limit, rand.Int64N(2147483645) + 1, s.k.WakeChannel(sh),
		s.k.ReadyPrefix(sh), s.k.PendingPrefix(sh), a.DeadMaxSize, a.DeadMaxAge.Milliseconds(),
		s.k.DonePrefix(), s.k.Ended(sh), s.k.EndedIndexPrefix(sh)}
	for _, c := range a.Candidates {
		args = append(args, c)
	}
	v, err := recoverScript.Run(ctx, s.rdb, []string{
		s.k.Delayed(sh), s.k.Tasks(sh), s.k.Inflight(sh), s.k.Leases(sh), s.k.Errors(sh),
		s.k.Dead(sh), s.k.DeadInfo(sh), s.k.Queues(sh), s.k.Epoch(sh), s.k.Stats(sh), s.k.ReadyQueues(sh), s.k.Counts(sh),
	}, args...).Slice()
	if err != nil {
		return RecoverResult{}, errtext.Errorf("recover shard %d: %w", sh, err)
	}
	if len(v) == 2 && v[0] == int64(-1) {
		return RecoverResult{}, fmt.Errorf("%w: shard %d: epoch %d, current %v", ErrStaleEpoch, sh, epoch, v[1])
	}
	if len(v) < 10 {
		return RecoverResult{}, errtext.Errorf("recover shard %d: unexpected reply %v", sh, v)
	}
	n := func(i int) int64 { x, _ := v[i].(int64); return x }
	r := RecoverResult{
		Now: n(1), Retried: int(n(2)), Buried: int(n(3)), Redelivered: int(n(4)),
		Trimmed: int(n(5)), NextDeadline: n(6), Pending: int(n(7)), Expired: int(n(8)), NextExpiry: n(9),
	}
	for _, c := range v[10:] {
		switch c := c.(type) {
		case string:
			r.Candidates = append(r.Candidates, c)
		case []any: // by_queue, last
			for i := 0; i+2 < len(c); i += 3 {
				q, _ := c[i].(string)
				re, _ := c[i+1].(int64)
				bu, _ := c[i+2].(int64)
				if q != "" {
					r.Failed = append(r.Failed, QueueFailures{Queue: q, Retried: int(re), Buried: int(bu)})
				}
			}
		}
	}
	return r, nil
}
