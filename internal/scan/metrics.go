package scan

import (
	"strconv"

	"github.com/hourglass-sched/hourglass/internal/telemetry"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the mover's Prometheus collectors. Build them with
// NewMetrics; a nil *Metrics records nothing.
type Metrics struct {
	moved       *prometheus.CounterVec
	buried      *prometheus.CounterVec
	promoted    *prometheus.CounterVec
	staged      *prometheus.CounterVec
	batch       prometheus.Histogram
	shared      prometheus.Histogram
	duration    prometheus.Histogram
	stale       *prometheus.CounterVec
	lateness    prometheus.Histogram
	scanErrors  *prometheus.CounterVec
	wakeups     prometheus.Counter
	subscribers prometheus.Gauge
}

// NewMetrics creates the collectors and registers them on reg (if not nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		moved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hourglass_moved_total", Help: "Tasks moved from the delayed set to ready lists.",
		}, []string{"shard"}),
		buried: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hourglass_move_buried_total", Help: "Delayed members sent to the dead-letter set by the mover (no or undecodable data).",
		}, []string{"shard"}),
		promoted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hourglass_far_promoted_total", Help: "Far-tier entries taken from their bucket into the delayed set (stale ones included).",
		}, []string{"shard"}),
		staged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hourglass_scan_staged_total", Help: "Mover calls planned ahead of half the prefetch to stage a dense batch (many tasks due within one prefetch window) before it is due.",
		}, []string{"shard"}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "hourglass_scan_moved", Help: "Tasks moved per mover call.",
			Buckets: []float64{0, 1, 4, 16, 64, 256, 1024, 4096},
		}),
		shared: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "hourglass_scan_shards_per_call", Help: "Shards whose mover calls went to Redis together in one round trip (1: alone).",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64},
		}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "hourglass_scan_duration_seconds", Help: "Duration of one mover call, round trip included.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		stale: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hourglass_stale_epoch_rejections_total", Help: "Mover calls rejected because a newer owner fenced the shard.",
		}, []string{"shard"}),
		lateness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "hourglass_move_lateness_seconds", Help: "Redis time at move minus due time, per moved task; a task moved ahead of its due time (scheduler.prefetch) counts 0.",
			Buckets: telemetry.LatenessBuckets,
		}),
		scanErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hourglass_scan_errors_total", Help: "Mover calls that failed (Redis unreachable, ...).",
		}, []string{"shard"}),
		wakeups: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hourglass_wakeups_total", Help: "Wake-up messages received from producers.",
		}),
		subscribers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hourglass_wake_subscriptions", Help: "Shard wake-up channels currently subscribed.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.moved, m.buried, m.promoted, m.staged, m.batch, m.shared, m.duration, m.stale, m.lateness, m.scanErrors, m.wakeups, m.subscribers)
	}
	return m
}

func label(sh int) string { return strconv.Itoa(sh) }

// initShard creates shard sh's series at zero, so that they are exported
// from the moment the shard is owned, before their first event:
// dashboards and alerts (rate(), absent()) work from the start.
func (m *Metrics) initShard(sh int) {
	if m == nil {
		return
	}
	l := label(sh)
	for _, v := range []*prometheus.CounterVec{m.moved, m.buried, m.promoted, m.staged, m.stale, m.scanErrors} {
		v.WithLabelValues(l)
	}
}

// observeShared records a round trip of n shards' mover calls.
func (m *Metrics) observeShared(n int) {
	if m != nil {
		m.shared.Observe(float64(n))
	}
}
