package dashboard

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/hourglass-sched/hourglass/internal/promread"
)

// Stats is the body of GET /ui/api/stats: the serving replica's move
// figures since it started, read from its own metrics. The page derives
// the move rate from two readings of MovedTotal.
type Stats struct {
	// MovedTotal counts the tasks this replica moved since it started.
	MovedTotal float64 `json:"moved_total"`
	// LatenessP50Ms and LatenessP99Ms estimate move lateness quantiles
	// since the start, in ms, as Prometheus's histogram_quantile does.
	LatenessP50Ms float64 `json:"lateness_p50_ms"`
	LatenessP99Ms float64 `json:"lateness_p99_ms"`
}

// stats reads Stats from g. A family not exported yet reads as zero.
func stats(g prometheus.Gatherer) (Stats, error) {
	var st Stats
	if g == nil {
		return st, nil
	}
	list, err := g.Gather()
	if err != nil {
		return st, err
	}
	fams := make(map[string]*dto.MetricFamily, len(list))
	for _, f := range list {
		fams[f.GetName()] = f
	}
	st.MovedTotal, _ = promread.Counter(fams, "hourglass_moved_total")
	var h promread.Histogram
	if h.Add(fams, "hourglass_move_lateness_seconds") == nil {
		st.LatenessP50Ms, st.LatenessP99Ms = h.Quantile(0.5)*1000, h.Quantile(0.99)*1000
	}
	return st, nil
}
