package scheduler

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hourglass-sched/hourglass/internal/shard"
)

// layoutCheck is how often a replica re-reads the layout record besides
// the announcements on the control channel and its resubscriptions (one
// HGETALL): a safety net for an announcement lost without a disconnect.
const layoutCheck = time.Minute

// adoptLayout reads the layout record and, if it changed, makes the
// election cover its span and wakes the migration loops. The configured
// shard count is the layout until a change is recorded; a different
// recorded count wins, with a warning.
func (s *Scheduler) adoptLayout(ctx context.Context) error {
	_, err := s.followLayout(ctx)
	return err
}

// preparingFor is how long a change may stay "preparing" before a
// scheduler finishes setting it up (the resize that began it died).
const preparingFor = 10 * time.Second

// followLayout is adoptLayout, reporting whether the layout changed. A
// change left "preparing" for preparingFor is finished here: its steps
// are idempotent, and until it is, producers on the old count are told
// to wait.
func (s *Scheduler) followLayout(ctx context.Context) (bool, error) {
	before := s.store.Layout()
	rec, err := s.store.ReadLayout(ctx)
	if err != nil {
		return false, err
	}
	if rec.State == shard.LayoutPreparing && time.Since(rec.Started) > preparingFor {
		s.log.Warn("a change of the shard count was left half set up; finishing it", "generation", rec.Gen, "shards", rec.Shards, "from", rec.From)
		if _, err := s.store.BeginResize(ctx, rec.Shards); err != nil {
			s.log.Warn("could not finish setting up the change of the shard count", "error", err)
		}
	} else {
		s.store.SetLayout(rec.Layout)
	}
	l := s.store.Layout()
	if l == before && s.election.Shards() == l.Span() {
		return false, nil
	}
	if l.Shards() != s.cfg.Shards && !s.warnedShards.Swap(true) {
		s.log.Warn("the layout record's shard count differs from the configured one, which only sets the initial count: the record wins",
			"configured", s.cfg.Shards, "shards", l.Shards(), "generation", l.Gen())
	}
	if l != before {
		s.log.Info("layout", "generation", l.Gen(), "shards", l.Shards(), "from", l.From(), "migrating", l.Migrating())
	}
	s.election.SetShards(l.Span())
	// Schedules' homes follow the shard count (fire's handover.go).
	s.firer.SetSchedules(s.firedSchedules())
	s.migrator.LayoutChanged()
	return l != before, nil
}

// checkLayout re-reads the layout record (watchSchedules calls it on each
// announcement on the control channel, which also fires on every
// resubscription, and every layoutCheck) and, when it changed, registers
// the configured queues in the shards of the new count: a queue this
// replica registered by the old count while the change was set up would
// miss them.
func (s *Scheduler) checkLayout(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	changed, err := s.followLayout(cctx)
	switch {
	case err != nil && ctx.Err() == nil:
		s.log.Warn("could not read the layout record; keeping the current layout", "error", err)
	case changed:
		if err := s.registerPolicies(cctx); err != nil {
			s.log.Warn("could not register the queues in the new shards; the registry check retries", "error", err)
		}
	}
}

// layoutGauges export the layout a replica runs by.
func layoutGauges(store *shard.Store) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "hourglass_layout_generation", Help: "Generation of the layout record this replica follows (0: the shard count was never changed).",
		}, func() float64 { return float64(store.Layout().Gen()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "hourglass_layout_shards", Help: "Shard count new tasks are placed by.",
		}, func() float64 { return float64(store.Layout().Shards()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "hourglass_layout_migrating", Help: "1 while a change of the shard count runs.",
		}, func() float64 {
			if store.Layout().Migrating() {
				return 1
			}
			return 0
		}),
	}
}
