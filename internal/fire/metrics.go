package fire

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the firing loop's collectors; a nil *Metrics records
// nothing.
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
			Name: "hourglass_periodic_last_occurrence_timestamp_seconds", Help: "The last occurrence fired or skipped of each schedule this replica fires (unix seconds).",
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
