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
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hourglass-sched/hourglass/internal/backoff"
	"github.com/hourglass-sched/hourglass/internal/shard"
)

// ErrInvalidConfig wraps every Config validation failure.
var ErrInvalidConfig = errors.New("recovery: invalid config")

// Defaults for Config's zero fields.
const (
	DefaultLimit         = 512
	DefaultStrandCheck   = 5 * time.Second
	DefaultSafetyRecheck = 30 * time.Second
	DefaultIdleRecheck   = 5 * time.Minute
)

// Config configures a Recoverer. Zero fields take the defaults above;
// DeadMaxSize and DeadMaxAge are 0 (unbounded) unless set.
type Config struct {
	// Limit bounds each part of one pass.
	Limit int
	// StrandCheck is the spacing of stranded-id checks; an id popped and
	// neither settled nor leased counts a failed attempt at the first check
	// that comes shard.UnleasedGrace or more after the check that saw it.
	StrandCheck time.Duration
	// SafetyRecheck bounds every sleep of a shard with leased or ready ids.
	SafetyRecheck time.Duration
	// IdleRecheck bounds the sleep of an idle shard (nothing leased,
	// nothing ready): its work can only come from the mover, which pokes
	// the loop, so this check is a backstop and for dead-letter retention.
	// A value below SafetyRecheck is raised to it.
	IdleRecheck time.Duration
	// DeadMaxSize and DeadMaxAge bound each shard's dead-letter set.
	DeadMaxSize int
	DeadMaxAge  time.Duration
	Logger      hclog.Logger
	Metrics     *Metrics
}

// Validate reports a configuration the loop cannot run with.
func (c Config) Validate() error {
	switch {
	case c.Limit < 1:
		return fmt.Errorf("%w: limit %d < 1", ErrInvalidConfig, c.Limit)
	case c.StrandCheck < time.Millisecond || c.SafetyRecheck < time.Millisecond || c.IdleRecheck < time.Millisecond:
		return fmt.Errorf("%w: intervals must be at least 1ms", ErrInvalidConfig)
	case c.DeadMaxSize < 0 || c.DeadMaxAge < 0:
		return fmt.Errorf("%w: negative dead-letter bound", ErrInvalidConfig)
	}
	return nil
}

// Metrics are the recovery loop's collectors; a nil *Metrics records
// nothing.
type Metrics struct {
	expired     *prometheus.CounterVec
	redelivered prometheus.Counter
	trimmed     prometheus.Counter
	errors      prometheus.Counter
	stale       prometheus.Counter
}

// NewMetrics creates the collectors and registers them on reg (if not nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		expired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hourglass_recovery_expired_leases_total",
			Help: "Leases that expired: outcome=retried (delivered again later: a possible duplicate) or buried (dead-lettered).",
		}, []string{"outcome"}),
		redelivered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hourglass_recovery_stranded_total", Help: "Ids popped by a worker that neither settled nor leased them (it died), counted as a failed attempt: rescheduled with backoff or dead-lettered.",
		}),
		trimmed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hourglass_dlq_trimmed_total", Help: "Dead-letter entries deleted by the retention bounds.",
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hourglass_recovery_errors_total", Help: "Recovery passes that failed (Redis unreachable, ...).",
		}),
		stale: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hourglass_recovery_stale_epoch_total", Help: "Recovery passes rejected because a newer owner fenced the shard.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.expired, m.redelivered, m.trimmed, m.errors, m.stale)
	}
	return m
}

// Recoverer runs recovery passes for the shards a scheduler owns.
type Recoverer struct {
	store *shard.Store
	cfg   Config
	log   hclog.Logger
}

// New returns a Recoverer on store.
func New(store *shard.Store, cfg Config) (*Recoverer, error) {
	if cfg.Limit == 0 {
		cfg.Limit = DefaultLimit
	}
	if cfg.StrandCheck == 0 {
		cfg.StrandCheck = DefaultStrandCheck
	}
	if cfg.SafetyRecheck == 0 {
		cfg.SafetyRecheck = DefaultSafetyRecheck
	}
	if cfg.IdleRecheck == 0 {
		cfg.IdleRecheck = DefaultIdleRecheck
	}
	cfg.IdleRecheck = max(cfg.IdleRecheck, cfg.SafetyRecheck)
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Recoverer{store: store, cfg: cfg, log: cfg.Logger.Named("recovery")}, nil
}

// Run recovers shard sh with fencing epoch until ctx ends (nil) or a newer
// owner fences the shard (an error wrapping shard.ErrStaleEpoch). Redis
// errors are logged and retried with backoff. poke (may be nil) wakes the
// loop early: the mover sends on it after making tasks ready.
func (r *Recoverer) Run(ctx context.Context, sh int, epoch int64, poke <-chan struct{}) error {
	log := r.log.With("shard", sh, "epoch", epoch)
	met := r.cfg.Metrics
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	// Stranded candidates are confirmed by a later pass; it must come at
	// least shard.UnleasedGrace after the pass that found them, so a
	// worker that popped ids before that pass has had that long to settle
	// or lease them (workers run popped tasks before leasing them).
	minAge := shard.UnleasedGrace
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
