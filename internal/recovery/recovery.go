// Package recovery runs the shard owner's recovery loop: it hands expired
// leases back to the delayed set with attempts+1 and exponential backoff
// (or to the dead-letter set with reason "lease expired" once retries are
// spent), takes back the ids a worker popped and neither settled nor
// leased (it died: a failed attempt too, with reason "worker lost the task
// before leasing it" once retries are spent), and applies the dead-letter
// retention bounds.
//
// Like the mover it is fenced by the owner's epoch and event-driven: it
// sleeps until the earliest lease deadline, the next stranded-id check
// (only while the shard has ready or leased ids), or a safety re-check
// (SafetyRecheck on an active shard, the longer IdleRecheck on an idle
// one). The shard's mover pokes it when it makes tasks ready, so an idle
// shard's recovery wakes up as soon as the shard has work.
package recovery

import (
	"context"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/hourglass-sched/hourglass/internal/owner"
	"github.com/hourglass-sched/hourglass/internal/shard"
)

// Recoverer runs recovery passes for the shards a scheduler owns.
type Recoverer struct {
	store *shard.Store
	cfg   Config
	log   hclog.Logger
}

// New returns a Recoverer on store.
func New(store *shard.Store, cfg Config) (*Recoverer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Recoverer{store: store, cfg: cfg, log: cfg.Logger.Named("recovery")}, nil
}

// Run recovers the owned shard s with its fencing epoch until ctx ends
// (nil) or a newer owner fences the shard (an error wrapping
// shard.ErrStaleEpoch): an owner.Loop, in owner.Repeat's shape. Redis
// errors are logged and retried with backoff. s.Ready (may be nil) wakes
// an idle shard's loop early: the mover signals it after making tasks
// ready.
func (r *Recoverer) Run(ctx context.Context, s owner.Shard) error {
	log := r.log.With("shard", s.ID, "epoch", s.Epoch)
	var st strands
	steps := owner.Steps{What: "recovery pass", Log: log}
	if met := r.cfg.Metrics; met != nil {
		steps.Errors, steps.Stale = met.errors, met.stale
	}
	steps.Step = func(ctx context.Context) (owner.Wait, error) {
		// An active shard is checked on its own cadence: a poke that came
		// while it waited is no reason to look again.
		select {
		case <-s.Ready:
		default:
		}
		pass := st.due()
		res, err := r.store.Recover(ctx, s.ID, s.Epoch, shard.RecoverArgs{
			Limit: r.cfg.Limit, Candidates: pass,
			DeadMaxSize: r.cfg.DeadMaxSize, DeadMaxAge: r.cfg.DeadMaxAge,
		})
		if err != nil {
			return owner.Wait{}, err
		}
		st.found(pass, res.Candidates)
		r.observe(log, res)
		if res.Retried+res.Buried >= r.cfg.Limit || res.Trimmed >= r.cfg.Limit {
			return owner.Wait{}, nil // more to do now
		}
		wait, idle := r.next(res, len(st.candidates) > 0)
		if idle {
			// Nothing ready or leased: the mover's poke ends the wait.
			return owner.Wait{For: wait, Wake: s.Ready}, nil
		}
		return owner.Wait{For: wait}, nil
	}
	return owner.Repeat(ctx, steps)
}

// strands tracks the stranded candidates of the last pass. They are
// confirmed by a later pass, which must come at least
// shard.StrandedMinAge after the pass that found them, so a worker that
// popped ids before that pass has had that long to settle or lease them
// (workers run popped tasks before leasing them).
type strands struct {
	candidates []string
	at         time.Time // when the pass that found them ran
}

// due returns the candidates to confirm in this pass: none while they are
// younger than shard.StrandedMinAge.
func (st *strands) due() []string {
	if time.Since(st.at) < shard.StrandedMinAge {
		return nil
	}
	return st.candidates
}

// found records the candidates a pass returned; a pass that was not given
// the current ones (they were too young) keeps them, unless there were
// none.
func (st *strands) found(passed, found []string) {
	if passed != nil || st.candidates == nil {
		st.candidates, st.at = found, time.Now()
	}
}

// next returns the wait after a pass: until the earliest lease deadline
// or expiry of a record of an ended task, the next stranded-id check
// while the shard has ready or leased ids (or candidates), else a safety
// re-check; idle reports a shard with nothing ready or leased (records
// or not), whose longer sleep a poke may end.
func (r *Recoverer) next(res shard.RecoverResult, candidates bool) (wait time.Duration, idle bool) {
	idle = res.NextDeadline < 0 && res.Pending == 0 && !candidates
	wait = r.cfg.SafetyRecheck
	if idle {
		wait = r.cfg.IdleRecheck
	}
	for _, at := range []int64{res.NextDeadline, res.NextExpiry} {
		if at >= 0 {
			wait = min(wait, time.Duration(at-res.Now+1)*time.Millisecond)
		}
	}
	if !idle {
		wait = min(wait, r.cfg.StrandCheck)
	}
	return max(wait, time.Millisecond), idle
}

func (r *Recoverer) observe(log hclog.Logger, res shard.RecoverResult) {
	if res.Retried+res.Buried+res.Redelivered > 0 {
		log.Info("recovered deliveries", "expired_retried", res.Retried, "expired_buried", res.Buried, "stranded_redelivered", res.Redelivered)
	}
	for _, f := range res.Failed {
		r.cfg.History.Count(f.Queue, shard.HistRetried, f.Retried)
		r.cfg.History.Count(f.Queue, shard.HistDead, f.Buried)
	}
	met := r.cfg.Metrics
	if met == nil {
		return
	}
	met.expired.WithLabelValues("retried").Add(float64(res.Retried))
	met.expired.WithLabelValues("buried").Add(float64(res.Buried))
	met.redelivered.Add(float64(res.Redelivered))
	met.trimmed.Add(float64(res.Trimmed))
	met.records.Add(float64(res.Expired))
}
