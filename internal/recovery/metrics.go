package recovery

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the recovery loop's collectors; a nil *Metrics records
// nothing.
type Metrics struct {
	expired     *prometheus.CounterVec
	redelivered prometheus.Counter
	trimmed     prometheus.Counter
	records     prometheus.Counter
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
		records: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hourglass_records_expired_total", Help: "Records of ended tasks (results) deleted past their queue's retention.",
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hourglass_recovery_errors_total", Help: "Recovery passes that failed (Redis unreachable, ...).",
		}),
		stale: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hourglass_recovery_stale_epoch_total", Help: "Recovery passes rejected because a newer owner fenced the shard.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.expired, m.redelivered, m.trimmed, m.records, m.errors, m.stale)
	}
	return m
}
