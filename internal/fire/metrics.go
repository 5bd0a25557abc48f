package fire

import "github.com/prometheus/client_golang/prometheus"

// Reasons an occurrence is recorded without a task: the reason label of
// hourglass_periodic_skipped_total.
const (
	skipOverlap = "overlap"
	skipPaused  = "paused"
	skipRefused = "refused"
	skipPolicy  = "policy"
)

// Metrics are the firing loop's collectors; a nil *Metrics records
// nothing. Every family is exported from the start: the counters of each
// schedule at zero once it is configured (declare), and its gauges once
// the owner of its home shard runs its loop.
type Metrics struct {
	fired    *prometheus.CounterVec
	skipped  *prometheus.CounterVec
	caughtUp *prometheus.CounterVec
	lateness prometheus.Histogram
	next     *prometheus.GaugeVec
	last     *prometheus.GaugeVec
	errors   prometheus.Counter
}

// NewMetrics creates the collectors and registers them on reg (if not nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		fired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hourglass_periodic_fired_total", Help: "Occurrences of a periodic schedule whose task was enqueued.",
		}, []string{"schedule"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hourglass_periodic_skipped_total",
			Help: "Occurrences recorded without a task: reason=overlap (the previous task still stored), paused, refused (the enqueue was refused: unknown queue, payload too large), policy (missed while no scheduler ran, skipped by the catch-up policy).",
		}, []string{"schedule", "reason"}),
		caughtUp: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hourglass_periodic_caught_up_total", Help: "Missed occurrences fired late by the catch-up policy (latest or all).",
		}, []string{"schedule"}),
		lateness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "hourglass_periodic_fire_lateness_seconds",
			Help:    "When an occurrence was fired (its task stored) minus when it was planned to be (the occurrence, less the lead); caught-up occurrences are not observed.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		next: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "hourglass_periodic_next_occurrence_timestamp_seconds", Help: "The next occurrence of each schedule this replica fires (unix seconds).",
		}, []string{"schedule"}),
		last: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "hourglass_periodic_last_occurrence_timestamp_seconds", Help: "The last occurrence fired or skipped of each schedule this replica fires (unix seconds; 0: none yet).",
		}, []string{"schedule"}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hourglass_periodic_errors_total", Help: "Firing passes that failed (Redis unreachable, ...); the loop re-reads the schedules' state and goes on.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.fired, m.skipped, m.caughtUp, m.lateness, m.next, m.last, m.errors)
	}
	return m
}

// declare creates schedule name's counters at zero (skipped once per
// reason), so that a scrape shows them before its first occurrence and a
// rate() over them starts from zero rather than from their first event.
func (m *Metrics) declare(name string) {
	m.fired.WithLabelValues(name)
	m.caughtUp.WithLabelValues(name)
	for _, r := range []string{skipOverlap, skipPaused, skipRefused, skipPolicy} {
		m.skipped.WithLabelValues(name, r)
	}
}
