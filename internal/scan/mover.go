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
}

// NewMover returns a Mover on store.
func NewMover(store *shard.Store, cfg Config) (*Mover, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Mover{store: store, cfg: cfg, log: cfg.Logger.Named("scan")}, nil
}

// Run moves the due tasks of the owned shard s with its fencing epoch
// until ctx ends (it then returns nil) or the shard is fenced by a newer
// owner (it returns an error wrapping shard.ErrStaleEpoch): an
// owner.Loop, in owner.Repeat's shape. s.Wake delivers producers'
// wake-ups (nil: none); while s.Subscribed reports them subscribed, the
// mover's longest sleep is IdleRecheck instead of SafetyRecheck. After a call that made tasks ready, Run signals
// s.Ready without blocking (nil: none); the shard's recovery loop
// listens. Redis errors are logged and retried with backoff; they never
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
	st.Step = func(ctx context.Context) (owner.Wait, error) {
		start := time.Now()
		res, err := m.store.MoveAhead(ctx, sh, epoch, m.cfg.Limit, m.cfg.Prefetch)
		if err != nil {
			return owner.Wait{Wake: s.Wake}, err
		}
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
		return owner.Wait{For: m.next(res, s.Subscribed != nil && s.Subscribed()), Wake: s.Wake}, nil
	}
	return owner.Repeat(ctx, st)
}

// next returns how long to sleep after a successful call: 0 or less to
// call again at once (a full batch, or far-tier tasks promoted: more may
// be due now), else until the next task is due (ahead by half the
// prefetch), at most the safety re-check, or the idle re-check while the
// shard's wake-ups are subscribed.
func (m *Mover) next(res shard.MoveResult, subscribed bool) time.Duration {
	if res.Moved+res.Buried >= m.cfg.Limit || res.Promoted > 0 {
		return 0
	}
	wait := m.cfg.SafetyRecheck
	if subscribed {
		wait = m.cfg.IdleRecheck
	}
	if res.NextDue >= 0 {
		// Microseconds: a sleep in whole ms of the truncated clock would
		// wake up to 1 ms late. With a prefetch, wake when the next task
		// is half of it from due: the call then moves it, and what is due
		// in the half after it, still ahead of time.
		wake := res.NextDue*1000 - (m.cfg.Prefetch / 2).Microseconds()
		wait = min(wait, time.Duration(wake-res.NowMicros)*time.Microsecond)
	}
	return wait
}

func (m *Mover) observe(sh int, d time.Duration, res shard.MoveResult) {
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
