package fire

import (
	"context"
	"fmt"
	"time"

	"github.com/hourglass-sched/hourglass/internal/owner"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/periodic"
)

// skipByPolicy records, before the missed occurrences the policy fires,
// those it does not: every occurrence after st.last and before the first
// of missed (up to now when none is fired), at most periodic.MaxCatchUp
// of them counted. They go in one fenced script call, as the last
// recorded and one entry of the history, so that a later pass (a reload,
// a hand-over, a restart) does not skip them again.
func (f *Firer) skipByPolicy(ctx context.Context, s owner.Shard, st *state, now time.Time, missed []time.Time) error {
	if st.last.IsZero() {
		return nil // never fired: it starts from now, nothing was missed
	}
	stop := now.Add(time.Millisecond) // up to now, included
	if len(missed) > 0 {
		stop = missed[0]
	}
	var first, last time.Time
	n := 0
	for t := st.c.Next(st.last); !t.IsZero() && t.Before(stop) && n < periodic.MaxCatchUp; t = st.c.Next(t) {
		if first.IsZero() {
			first = t
		}
		last, n = t, n+1
	}
	if n == 0 {
		return nil
	}
	reason := fmt.Sprintf("catch_up %s: %d missed while no scheduler fired them", st.c.CatchUp, n)
	if n == periodic.MaxCatchUp {
		reason = fmt.Sprintf("catch_up %s: at least %d missed while no scheduler fired them", st.c.CatchUp, n)
	}
	l := f.store.Layout()
	r, err := f.store.Fire(ctx, s.ID, shard.FireArgs{Schedule: st.c.Name, Occurrence: last, Epoch: s.Epoch,
		Task:   shard.EnqueueArgs{ID: l.OccurrenceID(st.c.Name, last), Queue: st.c.Queue, MaxRetries: -1},
		Policy: &shard.PolicySkip{First: first, Count: n, Reason: reason}})
	if err != nil {
		return fmt.Errorf("fire: %w", err)
	}
	if r.Outcome == shard.SkippedPolicy {
		f.met.skipped.WithLabelValues(st.c.Name, skipPolicy).Add(float64(n))
	}
	st.last = maxTime(st.last, r.Last)
	return nil
}
