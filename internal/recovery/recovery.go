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
	"errors"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/hourglass-sched/hourglass/internal/backoff"
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
// shard.ErrStaleEpoch): an owner.Loop. Redis errors are logged and
// retried with backoff. s.Ready (may be nil) wakes the loop early: the
// mover signals it after making tasks ready.
func (r *Recoverer) Run(ctx context.Context, s owner.Shard) error {
	sh, epoch, poke := s.ID, s.Epoch, s.Ready
	log := r.log.With("shard", sh, "epoch", epoch)
	met := r.cfg.Metrics
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	// Stranded candidates are confirmed by a later pass; it must come at
	// least shard.StrandedMinAge after the pass that found them, so a
	// worker that popped ids before that pass has had that long to settle
	// or lease them (workers run popped tasks before leasing them).
	minAge := shard.StrandedMinAge
	var candidates []string
	var candAt time.Time
	var bo backoff.Backoff
	for {
		pass := candidates
		if time.Since(candAt) < minAge {
			pass = nil
		}
		res, err := r.store.Recover(ctx, sh, epoch, shard.RecoverArgs{
			Limit: r.cfg.Limit, Candidates: pass,
			DeadMaxSize: r.cfg.DeadMaxSize, DeadMaxAge: r.cfg.DeadMaxAge,
		})
		if ctx.Err() != nil {
			return nil
		}
		var wait time.Duration
		idle := false // nothing ready or leased: a poke may wake us early
		switch {
		case errors.Is(err, shard.ErrStaleEpoch):
			if met != nil {
				met.stale.Inc()
			}
			log.Warn("shard fenced by a newer owner; stopping recovery", "error", err)
			return err
		case err != nil:
			if met != nil {
				met.errors.Inc()
			}
			wait = bo.Next()
			log.Warn("recovery pass failed; retrying", "error", err, "retry_in", wait)
		default:
			bo.Reset()
			if pass != nil || candidates == nil {
				candidates, candAt = res.Candidates, time.Now()
			}
			r.observe(log, res)
			if res.Retried+res.Buried >= r.cfg.Limit || res.Trimmed >= r.cfg.Limit {
				continue // more to do now
			}
			idle = res.NextDeadline < 0 && res.Pending == 0 && len(candidates) == 0
			wait = r.cfg.SafetyRecheck
			if idle {
				wait = r.cfg.IdleRecheck
			}
			if res.NextDeadline >= 0 {
				wait = min(wait, time.Duration(res.NextDeadline-res.Now+1)*time.Millisecond)
			}
			if res.Pending > 0 || len(candidates) > 0 || res.NextDeadline >= 0 {
				wait = min(wait, r.cfg.StrandCheck)
			}
			wait = max(wait, time.Millisecond)
		}
		timer.Reset(wait)
		for waiting := true; waiting; {
			select {
			case <-ctx.Done():
				return nil
			case <-timer.C:
				waiting = false
			case <-poke:
				if idle { // an active shard is checked on its own cadence
					timer.Stop()
					waiting = false
				}
			}
		}
	}
}

func (r *Recoverer) observe(log hclog.Logger, res shard.RecoverResult) {
	if res.Retried+res.Buried+res.Redelivered > 0 {
		log.Info("recovered deliveries", "expired_retried", res.Retried, "expired_buried", res.Buried, "stranded_redelivered", res.Redelivered)
	}
	met := r.cfg.Metrics
	if met == nil {
		return
	}
	met.expired.WithLabelValues("retried").Add(float64(res.Retried))
	met.expired.WithLabelValues("buried").Add(float64(res.Buried))
	met.redelivered.Add(float64(res.Redelivered))
	met.trimmed.Add(float64(res.Trimmed))
}
