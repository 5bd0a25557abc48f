package scan

import (
	"time"

	"github.com/hourglass-sched/hourglass/internal/shard"
)

// stageCost is the Redis time a moved task is planned with when a mover
// stages a dense batch. The cost scenario of `make bench` measures about
// 5 µs a task on two cores (a 512-task move.lua call); this allows a
// slower server half again. Shards sharing a server move in parallel, so
// each shard's batch is planned at stageCost times the shard count.
const stageCost = 8 * time.Microsecond

// stagePlan is a mover's plan for its next call: lead is how long before
// the next due time the call goes, horizon how far ahead of Redis's time
// it moves tasks (the call's prefetch).
type stagePlan struct {
	lead, horizon time.Duration
}

// plan returns the plan after a call that returned res. Without a
// prefetch it is to call when the next task is due and move what is due.
// With one, the call goes when the next task is half the prefetch from
// due and moves a whole prefetch ahead; and when many tasks are due
// within the prefetch of the next (res.Ahead: a burst, say 100,000 tasks
// due at one instant), it goes earlier by the time moving them takes,
// planned at stageCost per task and shard, up to shard.MaxStage ahead:
// the batch is then in its ready lists when it is due, and the workers,
// which hold each task until its due time on Redis's clock, start it on
// time instead of waiting for the movers. Moving a batch costs Redis
// what it costs; staging it only moves that work before the due time.
// Only where every worker holds a task that long (the store's
// StagingAllowed).
func (m *Mover) plan(res shard.MoveResult) stagePlan {
	half := m.cfg.Prefetch / 2
	p := stagePlan{lead: half, horizon: m.cfg.Prefetch}
	if m.cfg.Prefetch <= 0 || res.Ahead <= 0 || !m.store.StagingAllowed() {
		return p
	}
	moving := time.Duration(res.Ahead) * time.Duration(max(m.store.Layout().Existing(), 1)) * stageCost
	p.lead = min(half+moving, shard.MaxStage-half)
	p.horizon = p.lead + half
	return p
}

// goOn returns next, the plan after res, for a call made at once because
// res came back full: a call planned with prev stopped at its LIMIT
// before the next due task, which prev's horizon covered. The horizon
// keeps covering it, so that a staged batch goes on moving when what is
// left of it plans a shorter lead; it never reaches further than prev's.
// Only where plan stages at all (a prefetch, StagingAllowed): elsewhere
// and after a promotion of far-tier tasks, next as it is.
func (m *Mover) goOn(prev, next stagePlan, res shard.MoveResult) stagePlan {
	if m.cfg.Prefetch <= 0 || !m.store.StagingAllowed() || res.NextDue < 0 || res.Moved+res.Buried < m.cfg.Limit {
		return next
	}
	if d := time.Duration(res.NextDue-res.Now) * time.Millisecond; d <= prev.horizon {
		next.horizon = max(next.horizon, d)
	}
	return next
}

// observeStage counts a plan that stages a dense batch: one whose lead
// is longer than half the prefetch by a millisecond or more.
func (m *Mover) observeStage(sh int, p stagePlan) {
	if met := m.cfg.Metrics; met != nil && p.lead-m.cfg.Prefetch/2 >= time.Millisecond {
		met.staged.WithLabelValues(label(sh)).Inc()
	}
}
