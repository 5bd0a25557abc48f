package reshard

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hourglass-sched/hourglass/internal/shard"
)

// Metrics are the reshard's collectors; a nil *Metrics records nothing.
type Metrics struct {
	movedTotal  prometheus.Counter
	passes      prometheus.Counter
	stayedTasks prometheus.Counter
	errors      prometheus.Counter
	// waiting is, per shard of this replica, the tasks its last pass
	// left in the shard because they were in flight or due soon, by
	// queue and why: what keeps the shard from being done.
	waiting *prometheus.GaugeVec
	// readyMoved counts ready tasks moved because they waited for a
	// worker (Config.ReadyAfter) or their queue was paused.
	readyMoved prometheus.Counter
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
		waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "hourglass_reshard_waiting_tasks",
			Help: "Tasks the last reshard pass over an owned shard left in it, by queue and why (ready, leased, due soon): while a change of the shard count runs, they keep the shard from being done.",
		}, []string{"shard", "queue", "why"}),
		readyMoved: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hourglass_reshard_ready_moved_total", Help: "Ready tasks moved to their new shard because their queue was paused or they waited longer than scheduler.reshard_ready_after.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.movedTotal, m.passes, m.stayedTasks, m.errors, m.waiting, m.readyMoved)
	}
	return m
}

// stayed sets shard sh's waiting tasks to what its last pass left
// (nil: none, the shard is done or no change runs).
func (m *Metrics) stayed(sh int, by map[shard.Stay]int) {
	if m == nil {
		return
	}
	label := strconv.Itoa(sh)
	m.waiting.DeletePartialMatch(prometheus.Labels{"shard": label})
	for k, n := range by {
		m.waiting.WithLabelValues(label, k.Queue, k.Why).Set(float64(n))
	}
}

func (m *Metrics) movedReady(n int) {
	if m != nil {
		m.readyMoved.Add(float64(n))
	}
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
