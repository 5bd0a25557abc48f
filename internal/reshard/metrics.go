package reshard

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the reshard's collectors; a nil *Metrics records nothing.
type Metrics struct {
	movedTotal  prometheus.Counter
	passes      prometheus.Counter
	stayedTasks prometheus.Counter
	errors      prometheus.Counter
}

// NewMetrics creates the collectors and registers them on reg (if not nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		movedTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hourglass_reshard_moved_total", Help: "Tasks this replica moved to their new shard while the shard count changed.",
		}),
		passes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hourglass_reshard_passes_total", Help: "Scans of an owned shard for tasks to move.",
		}),
		stayedTasks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hourglass_reshard_stayed_total", Help: "Tasks a scan left in their old shard because they were in flight or due within the margin (they run there).",
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hourglass_reshard_errors_total", Help: "Reshard steps that failed and were retried.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.movedTotal, m.passes, m.stayedTasks, m.errors)
	}
	return m
}

func (m *Metrics) moved(n int) {
	if m != nil {
		m.movedTotal.Add(float64(n))
	}
}

func (m *Metrics) pass(stayed int) {
	if m != nil {
		m.passes.Inc()
		m.stayedTasks.Add(float64(stayed))
	}
}

// errorCounter is the counter of failed steps, nil for a nil *Metrics.
func (m *Metrics) errorCounter() prometheus.Counter {
	if m == nil {
		return nil
	}
	return m.errors
}
