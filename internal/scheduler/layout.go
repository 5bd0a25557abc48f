package scheduler

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hourglass-sched/hourglass/internal/shard"
)

// A replica follows the layout record (the shard count) through its
// store's follower (shard.Follower): read at start, on each announcement
// on the control channel (watchSchedules) and every layout_refresh. The
// configured shard count is the layout until a change is recorded; a
// different recorded count wins, with a warning. A change left half set
// up by a resize that stopped is finished by the follower
// (FinishStalled).

// onLayout is the follower's OnChange: it makes the election cover the
// shards that exist now, gives the firer the schedules again (their
// homes follow the count), wakes the reshard loops, and asks
// watchSchedules to register the configured queues in any new shards. It
// does not block.
func (s *Scheduler) onLayout(before, after shard.Layout) {
	if after.Shards() != s.cfg.Shards && !s.warnedShards.Swap(true) {
		s.log.Warn("the layout record's shard count differs from the configured one, which only sets the initial count: the record wins",
			"configured", s.cfg.Shards, "shards", after.Shards(), "generation", after.Gen())
	}
	s.log.Info("layout", "generation", after.Gen(), "shards", after.Shards(), "from", after.From(), "resharding", after.Resharding())
	s.election.SetShards(after.Existing())
	s.firer.SetSchedules(s.firedSchedules())
	s.resharder.LayoutChanged()
	select {
	case s.relayout <- struct{}{}:
	default:
	}
}

// checkLayout reads the layout record now (an announcement on the control
// channel, or the start): the follower adopts a change and calls
// onLayout.
func (s *Scheduler) checkLayout(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err := s.layout.Check(cctx)
	if err != nil && ctx.Err() == nil {
		s.log.Warn("could not read the layout record; keeping the current layout", "error", err)
	}
	return err
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
			Name: "hourglass_layout_resharding", Help: "1 while a change of the shard count runs.",
		}, func() float64 {
			if store.Layout().Resharding() {
				return 1
			}
			return 0
		}),
	}
}

// operationsCollector exports the deployment's tallies of operations on
// stored tasks (shard.OperationCounts) as hourglass_task_operations_total,
// read from Redis at each scrape: every scheduler reports the same
// totals (aggregate with max, not sum).
type operationsCollector struct {
	store *shard.Store
	desc  *prometheus.Desc
}

func newOperationsCollector(store *shard.Store) *operationsCollector {
	return &operationsCollector{store: store, desc: prometheus.NewDesc("hourglass_task_operations_total",
		"Operations on stored tasks that succeeded in the whole deployment, by op: reschedule, replace, debounce (calls answered; one that changes its window's task counts a replace too), unique (enqueues with a reservation), cancel, result (records of succeeded tasks kept). The same on every scheduler.",
		[]string{"op"}, nil)}
}

// Describe implements prometheus.Collector.
func (c *operationsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector: one pipelined read over the
// shards, bounded by a second; a failed read reports nothing this time.
func (c *operationsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	counts, err := c.store.OperationCounts(ctx)
	if err != nil {
		return // not an error of the scrape: the other metrics still go out
	}
	for _, op := range shard.Operations {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(counts[op]), op)
	}
}
