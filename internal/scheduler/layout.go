package scheduler

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hourglass-sched/hourglass/internal/fanout"
	"github.com/hourglass-sched/hourglass/internal/shard"
)

// layoutCheck is how often a replica re-reads the layout record besides
// the announcements on the control channel (one HGETALL).
const layoutCheck = 5 * time.Second

// adoptLayout reads the layout record and, if it changed, makes the
// election cover its span and wakes the migration loops. The configured
// shard count is the layout until a change is recorded; a different
// recorded count wins, with a warning.
func (s *Scheduler) adoptLayout(ctx context.Context) error {
	before := s.store.Layout()
	l, err := s.store.RefreshLayout(ctx)
	if err != nil {
		return err
	}
	if l == before && s.election.Shards() == l.Span() {
		return nil
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
	return nil
}

// watchLayout follows the layout record until ctx ends: on each
// announcement on the control channel (shard.LayoutChanged, among
// others) and every layoutCheck.
func (s *Scheduler) watchLayout(ctx context.Context) {
	hub := fanout.New(s.rdb, fanout.Classic, s.log)
	defer hub.Close()
	changed, stop := hub.Signal(ctx, s.store.Layout().ControlChannel(), nil)
	defer stop()
	tick := time.NewTicker(layoutCheck)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-tick.C:
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		if err := s.adoptLayout(cctx); err != nil && ctx.Err() == nil {
			s.log.Warn("could not read the layout record; keeping the current layout", "error", err)
		}
		cancel()
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
