package scan

import (
	"context"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/hourglass-sched/hourglass/internal/owner"
	"github.com/hourglass-sched/hourglass/internal/shard"
)

// Mover moves due tasks of owned shards. One Mover serves every shard of
// a scheduler; Run is called once per owned shard.
type Mover struct {
	store *shard.Store
	cfg   Config
	log   hclog.Logger
	comb  *combiner // every shard's calls, sent together when they overlap
}

// NewMover returns a Mover on store.
func NewMover(store *shard.Store, cfg Config) (*Mover, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Mover{store: store, cfg: cfg, log: cfg.Logger.Named("scan"), comb: newCombiner(store, cfg.Metrics)}, nil
}

// Run moves the due tasks of the owned shard s with its fencing epoch
// until ctx ends (it then returns nil) or the shard is fenced by a newer
// owner (it returns an error wrapping shard.ErrStaleEpoch): an
// owner.Loop, in owner.Repeat's shape. s.Wake delivers producers'
// wake-ups (nil: none); while s.Subscribed reports them subscribed, the
// mover's longest sleep is IdleRecheck instead of SafetyRecheck. After a
// call that made tasks ready, Run signals s.Ready without blocking (nil:
// none); the shard's recovery loop listens. Redis errors are logged and retried with backoff; they never
// end Run.
func (m *Mover) Run(ctx context.Context, s owner.Shard) error {
	sh, epoch, poke := s.ID, s.Epoch, s.Ready
	log := m.log.With("shard", sh, "epoch", epoch)
	met := m.cfg.Metrics
	met.initShard(sh)
	st := owner.Steps{What: "mover call", Log: log}
	if met != nil {
		l := label(sh)
		st.Errors, st.Stale = met.scanErrors.WithLabelValues(l), met.stale.WithLabelValues(l)
	}
	// more: the last call left tasks due now (a full batch, far-tier
	// tasks promoted, a combined call's share used up). The next call
	// then goes at once on its own, in parallel with the other shards'
	// (a burst drains on every shard at once), not through the combiner,
	// which sends one batch at a time; calls woken by a timer or a
	// wake-up, one or a few tasks each, share their round trips there.
	more := false
	subscribed := func() bool { return s.Subscribed != nil && s.Subscribed() }
	var idle idleCheck
	// plan: when to call before the next due time, and how far ahead that
	// call moves (a dense batch is staged; see plan).
	plan := m.plan(shard.MoveResult{})
	st.Step = func(ctx context.Context) (owner.Wait, error) {
		if wait, ok := idle.skip(ctx, m, sh, subscribed()); ok {
			return owner.Wait{For: wait, Wake: s.Wake}, nil
		}
		start := time.Now()
		req := shard.MoveRequest{Shard: sh, Epoch: epoch, Limit: m.cfg.Limit, Prefetch: plan.horizon}
		if m.store.StagingAllowed() {
			req.Window = m.cfg.Prefetch // how dense the next batch is (plan)
		}
		var res shard.MoveResult
		var err error
		if more {
			res, err = m.store.MoveShard(ctx, req)
		} else {
			res, err = m.comb.move(ctx, req)
		}
		more = false
		if err != nil {
			idle = idleCheck{}
			return owner.Wait{Wake: s.Wake}, err
		}
		prev := plan
		plan = m.plan(res)
		m.observeStage(sh, plan)
		m.observe(sh, time.Since(start), res)
		if res.Buried > 0 {
			log.Warn("buried undecodable delayed members", "count", res.Buried)
		}
		if res.Moved > 0 && poke != nil {
			select {
			case poke <- struct{}{}:
			default:
			}
		}
		// At once after a full batch, promoted far-tier tasks, or the
		// next task due; else until then or a wake-up.
		wait := m.next(res, plan, subscribed())
		more = wait <= 0
		if more {
			plan = m.goOn(prev, plan, res)
		}
		idle.called(m, res, plan, wait, subscribed())
		return owner.Wait{For: wait, Wake: s.Wake}, nil
	}
	return owner.Repeat(ctx, st)
}

// idleCheck makes the idle re-check of a mover whose wake-ups are
// subscribed cheap: when its timer ends the wait (not a wake-up, nor the
// next due time), the mover first reads the head of the delayed set (one
// command, DelayedHead) and calls the move script (four commands in
// Redis) only if the head changed since the last call: a task written by
// hand without a wake-up, earlier than the next due time known. The zero
// value checks nothing.
type idleCheck struct {
	head    float64   // the last call's NextDue
	hasHead bool      // the last call reported one
	at      time.Time // when the wait ending in an idle re-check ends; zero: none
	due     time.Time // local time of the next due call; zero: none
}

// called records a move call's result, its plan and the wait that
// follows it.
func (c *idleCheck) called(m *Mover, res shard.MoveResult, p stagePlan, wait time.Duration, subscribed bool) {
	now := time.Now()
	*c = idleCheck{head: float64(res.NextDue), hasHead: res.NextDue >= 0}
	if d, ok := untilDue(res, p); ok {
		c.due = now.Add(d)
	}
	if subscribed && wait == m.cfg.IdleRecheck {
		c.at = now.Add(wait)
	}
}

// skip reports whether the step may skip the move call, and the wait
// then: it is the idle re-check's turn, the next due time has not come,
// and the delayed set's head is what the last call left.
func (c *idleCheck) skip(ctx context.Context, m *Mover, sh int, subscribed bool) (time.Duration, bool) {
	now := time.Now()
	if c.at.IsZero() || now.Before(c.at) || !subscribed || (!c.due.IsZero() && !now.Before(c.due)) {
		return 0, false
	}
	head, ok, err := m.store.DelayedHead(ctx, sh)
	if err != nil || ok != c.hasHead || (ok && head != c.head) {
		return 0, false
	}
	wait := m.cfg.IdleRecheck
	if !c.due.IsZero() {
		wait = min(wait, c.due.Sub(now))
	}
	c.at = time.Time{}
	if wait == m.cfg.IdleRecheck {
		c.at = now.Add(wait)
	}
	return wait, true
}

// next returns how long to sleep after a successful call: 0 or less to
// call again at once (a full batch, or far-tier tasks promoted: more may
// be due now), else until the next task is due (ahead by the plan's
// lead), at most the safety re-check, or the idle re-check while the
// shard's wake-ups are subscribed.
func (m *Mover) next(res shard.MoveResult, p stagePlan, subscribed bool) time.Duration {
	if res.Moved+res.Buried >= m.cfg.Limit || res.Promoted > 0 {
		return 0
	}
	wait := m.cfg.SafetyRecheck
	if subscribed {
		wait = m.cfg.IdleRecheck
	}
	if d, ok := untilDue(res, p); ok {
		wait = min(wait, d)
	}
	if res.NextWake >= 0 {
		// A fair queue's key waits for its next token: the call goes at
		// that time exactly, not ahead by the lead (move.lua acts on it
		// only once it has come).
		wait = min(wait, time.Duration(res.NextWake*1000-res.NowMicros)*time.Microsecond)
	}
	return wait
}

// untilDue returns how long after a call the next one is due for the
// next task (ahead by the plan's lead), if there is one.
func untilDue(res shard.MoveResult, p stagePlan) (time.Duration, bool) {
	if res.NextDue < 0 {
		return 0, false
	}
	// Microseconds: a sleep in whole ms of the truncated clock would wake
	// up to 1 ms late.
	wake := res.NextDue*1000 - p.lead.Microseconds()
	return time.Duration(wake-res.NowMicros) * time.Microsecond, true
}

func (m *Mover) observe(sh int, d time.Duration, res shard.MoveResult) {
	if res.Moved > 0 && m.cfg.Moved != nil {
		m.cfg.Moved(sh)
	}
	met := m.cfg.Metrics
	if met == nil {
		return
	}
	met.duration.Observe(d.Seconds())
	met.batch.Observe(float64(res.Moved))
	if res.Moved > 0 {
		met.moved.WithLabelValues(label(sh)).Add(float64(res.Moved))
	}
	if res.Buried > 0 {
		met.buried.WithLabelValues(label(sh)).Add(float64(res.Buried))
	}
	if res.Promoted > 0 {
		met.promoted.WithLabelValues(label(sh)).Add(float64(res.Promoted))
	}
	for _, l := range res.Late {
		met.lateness.Observe(float64(max(l, 0)) / 1000) // moved ahead: 0
	}
}
