package worker

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hourglass-sched/hourglass/internal/telemetry"
)

// metrics are the worker's Prometheus collectors, labelled by queue.
type metrics struct {
	deliveries *prometheus.CounterVec
	lateLeases *prometheus.CounterVec
	held       *prometheus.CounterVec
	acks       *prometheus.CounterVec
	nacks      *prometheus.CounterVec
	retries    *prometheus.CounterVec
	dead       *prometheus.CounterVec
	released   *prometheus.CounterVec
	leaseLost  *prometheus.CounterVec
	stale      *prometheus.CounterVec
	unrecorded *prometheus.CounterVec
	dropped    *prometheus.CounterVec
	cancelled  *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	lateness   *prometheus.HistogramVec
	running    *prometheus.GaugeVec
	fetchErrs  prometheus.Counter
	// clockBehind counts deliveries due further ahead than any prefetch.
	clockBehind *prometheus.CounterVec
	permits     *prometheus.GaugeVec
	registered  *prometheus.GaugeVec
	paused      *prometheus.GaugeVec
	excluded    *prometheus.GaugeVec
	share       *prometheus.GaugeVec
	mismatch    prometheus.Gauge
	flowWaits   *prometheus.CounterVec
	placeWaits  *prometheus.CounterVec
	flowWait    *prometheus.HistogramVec
	throttled   *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	q := []string{"queue"}
	m := &metrics{
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hourglass_worker_deliveries_total", Help: "Tasks delivered to this worker (leased, or popped to run before a lease)."}, q),
		lateLeases: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hourglass_worker_late_leases_total", Help: "Deliveries run before a lease and leased because their handler outlived LeaseAfter."}, q),
		held:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hourglass_worker_held_total", Help: "Deliveries popped before their due time (scheduler.prefetch) and held until it."}, q),
		acks:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hourglass_worker_acks_total", Help: "Deliveries acknowledged (task done)."}, q),
		nacks:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hourglass_worker_nacks_total", Help: "Deliveries that failed (retried or dead-lettered)."}, q),
		retries:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hourglass_worker_retries_total", Help: "Failed deliveries rescheduled with backoff."}, q),
		dead:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hourglass_worker_dead_total", Help: "Failed deliveries sent to the dead-letter queue."}, q),
		released:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hourglass_worker_released_total", Help: "Deliveries given back unfinished: at shutdown, or popped just as their queue was paused."}, q),
		leaseLost:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hourglass_worker_leases_lost_total", Help: "Deliveries whose lease could not be kept; the handler ctx was cancelled."}, q),
		stale:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hourglass_worker_stale_tokens_total", Help: "Acks, nacks or extensions rejected because the delivery was no longer current."}, q),
		unrecorded: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hourglass_worker_unrecorded_total",
			Help: "Outcomes that could not be recorded in Redis within the settle timeout (Redis unreachable or slow): the task is delivered again after its lease."}, q),
		cancelled: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hourglass_worker_cancelled_total",
			Help: "Deliveries whose task was cancelled while this worker had it (client.Cancel): the handler's ctx was cancelled with ErrCancelled and its outcome not recorded."}, q),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hourglass_worker_dropped_total",
			Help: "Popped tasks dropped without running: no longer this worker's when it came to lease them (cancelled, or taken back by recovery while the worker was paused)."}, q),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "hourglass_worker_handler_duration_seconds", Help: "Handler run time.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 20),
		}, q),
		lateness: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "hourglass_worker_lateness_seconds", Help: "Handler start minus due time (Redis clock; local clock for tasks run before a lease or held until due).",
			Buckets: telemetry.LatenessBuckets,
		}, q),
		running:   prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "hourglass_worker_running", Help: "Handlers running now."}, q),
		fetchErrs: prometheus.NewCounter(prometheus.CounterOpts{Name: "hourglass_worker_fetch_errors_total", Help: "Failed fetches or claims (Redis unreachable, ...)."}),
		clockBehind: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hourglass_worker_clock_behind_total",
			Help: "Deliveries due further ahead of this worker's clock than scheduler.prefetch can move a task (the clock is behind Redis's); run at once, not held."}, q),
		permits: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "hourglass_worker_permits_in_use", Help: "Cluster-wide concurrency permits this worker holds."}, q),
		registered: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "hourglass_worker_queue_registered",
			Help: "1 when the schedulers registered the queue in every shard of this worker's namespace and shard count (checked every minute), else 0."}, q),
		paused: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "hourglass_worker_queue_paused",
			Help: "1 while the queue is paused (hourglass queue pause): this worker starts none of its tasks, else 0."}, q),
		excluded: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "hourglass_worker_queue_excluded",
			Help: "1 while the queue's routing (hourglass queue route) excludes this worker's version or tags: it starts none of its tasks, else 0."}, q),
		share: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "hourglass_worker_queue_share",
			Help: "While the queue's routing has a share (hourglass queue route --share): the percentage of its tasks this worker's side takes (its canary set's share, or the rest), else 0."}, q),
		mismatch: prometheus.NewGauge(prometheus.GaugeOpts{Name: "hourglass_worker_setup_mismatch",
			Help: "1 when a queue, the namespace or the shard count of this worker differs from the schedulers' (see the log), else 0."}),
		placeWaits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hourglass_worker_place_waits_total", Help: "Deliveries that waited for a handler place: tasks held until due that came due while Concurrency handlers ran."}, q),
		flowWaits:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hourglass_worker_permit_waits_total", Help: "Deliveries that waited for a concurrency permit before their handler started."}, q),
		flowWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "hourglass_worker_permit_wait_seconds", Help: "Time to get a concurrency permit.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 12),
		}, q),
		throttled: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hourglass_worker_throttled_total", Help: "Admissions denied by the queue's rate limit."}, q),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.deliveries, m.lateLeases, m.held, m.acks, m.nacks, m.retries, m.dead, m.released, m.leaseLost, m.stale, m.unrecorded, m.dropped, m.cancelled, m.duration, m.lateness, m.running, m.fetchErrs, m.clockBehind, m.permits, m.registered, m.paused, m.excluded, m.share, m.mismatch, m.flowWaits, m.placeWaits, m.flowWait, m.throttled} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// queueMetrics are the series of one queue, looked up once per queue
// instead of once per delivery. Looking them up creates them, at zero, so
// every queue's series are exported from the start.
type queueMetrics struct {
	deliveries, acks, lateLeases, held prometheus.Counter
	nacks, retries, dead, released     prometheus.Counter
	leaseLost, stale, throttled        prometheus.Counter
	unrecorded                         prometheus.Counter
	dropped, cancelled, clockBehind    prometheus.Counter
	flowWaits, placeWaits              prometheus.Counter
	lateness, duration, flowWait       prometheus.Observer
	running, permits, registered       prometheus.Gauge
	paused, excluded, share            prometheus.Gauge
}

func (m *metrics) forQueue(q string) queueMetrics {
	return queueMetrics{
		deliveries:  m.deliveries.WithLabelValues(q),
		acks:        m.acks.WithLabelValues(q),
		lateLeases:  m.lateLeases.WithLabelValues(q),
		held:        m.held.WithLabelValues(q),
		nacks:       m.nacks.WithLabelValues(q),
		retries:     m.retries.WithLabelValues(q),
		dead:        m.dead.WithLabelValues(q),
		released:    m.released.WithLabelValues(q),
		leaseLost:   m.leaseLost.WithLabelValues(q),
		stale:       m.stale.WithLabelValues(q),
		unrecorded:  m.unrecorded.WithLabelValues(q),
		dropped:     m.dropped.WithLabelValues(q),
		cancelled:   m.cancelled.WithLabelValues(q),
		clockBehind: m.clockBehind.WithLabelValues(q),
		throttled:   m.throttled.WithLabelValues(q),
		flowWaits:   m.flowWaits.WithLabelValues(q),
		placeWaits:  m.placeWaits.WithLabelValues(q),
		lateness:    m.lateness.WithLabelValues(q),
		duration:    m.duration.WithLabelValues(q),
		flowWait:    m.flowWait.WithLabelValues(q),
		running:     m.running.WithLabelValues(q),
		permits:     m.permits.WithLabelValues(q),
		registered:  m.registered.WithLabelValues(q),
		paused:      m.paused.WithLabelValues(q),
		excluded:    m.excluded.WithLabelValues(q),
		share:       m.share.WithLabelValues(q),
	}
}
