package election

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Values of the "change" label of hourglass_ownership_changes_total.
const (
	changeAcquired = "acquired" // won a shard
	changeReleased = "released" // gave a shard up: rebalance, RunFunc returned, shutdown
	changeLost     = "lost"     // ownership ended without our consent: validity lost, key gone
)

type metrics struct {
	owned     prometheus.Gauge
	changes   *prometheus.CounterVec
	leaseLost prometheus.Counter
}

// newMetrics creates the manager's metrics and registers them on reg if
// it is not nil.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		owned: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hourglass_shards_owned",
			Help: "Shards this scheduler replica currently owns and runs.",
		}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hourglass_ownership_changes_total",
			Help: "Shard ownership changes of this replica, by change (acquired, released, lost).",
		}, []string{"change"}),
		leaseLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hourglass_lease_lost_total",
			Help: "Times this replica's etcd lease lost validity and shard work was stopped.",
		}),
	}
	for _, c := range []string{changeAcquired, changeReleased, changeLost} {
		m.changes.WithLabelValues(c)
	}
	if reg == nil {
		return m, nil
	}
	var done []prometheus.Collector
	for _, c := range []prometheus.Collector{m.owned, m.changes, m.leaseLost} {
		if err := reg.Register(c); err != nil {
			for _, d := range done {
				reg.Unregister(d)
			}
			return nil, fmt.Errorf("election: register metrics: %w", err)
		}
		done = append(done, c)
	}
	return m, nil
}
