package dashboard

import (
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// rates derives the replica's move rate and lateness from its own
// metrics: tasks moved per second since the previous sample (of this
// replica's shards), and quantiles of hourglass_move_lateness_seconds
// since the replica started.
type rates struct {
	g prometheus.Gatherer

	mu    sync.Mutex
	at    time.Time
	moved float64
}

func newRates(g prometheus.Gatherer) *rates { return &rates{g: g} }

// Stats is the body of GET /ui/api/stats.
type Stats struct {
	// MovedPerSecond is the replica's move rate since the previous
	// request (-1 on the first).
	MovedPerSecond float64 `json:"moved_per_second"`
	// MovedTotal counts the tasks this replica moved since it started.
	MovedTotal float64 `json:"moved_total"`
	// LatenessP50Ms and LatenessP99Ms are move lateness quantiles since
	// the start, in ms, from the histogram's buckets (upper bounds).
	LatenessP50Ms float64 `json:"lateness_p50_ms"`
	LatenessP99Ms float64 `json:"lateness_p99_ms"`
}

func (r *rates) sample(now time.Time) Stats {
	st := Stats{MovedPerSecond: -1}
	if r.g == nil {
		return st
	}
	fams, err := r.g.Gather()
	if err != nil {
		return st
	}
	var hist *dto.Histogram
	for _, f := range fams {
		switch f.GetName() {
		case "hourglass_moved_total":
			for _, m := range f.Metric {
				st.MovedTotal += m.GetCounter().GetValue()
			}
		case "hourglass_move_lateness_seconds":
			if len(f.Metric) > 0 {
				hist = f.Metric[0].GetHistogram()
			}
		}
	}
	st.LatenessP50Ms, st.LatenessP99Ms = quantile(hist, 0.5)*1000, quantile(hist, 0.99)*1000
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.at.IsZero() && now.After(r.at) {
		st.MovedPerSecond = (st.MovedTotal - r.moved) / now.Sub(r.at).Seconds()
	}
	r.at, r.moved = now, st.MovedTotal
	return st
}

// quantile returns the upper bound of the bucket holding quantile q of h
// (0 without observations; the largest finite bound past the last).
func quantile(h *dto.Histogram, q float64) float64 {
	if h == nil || h.GetSampleCount() == 0 {
		return 0
	}
	rank := q * float64(h.GetSampleCount())
	last := 0.0
	for _, b := range h.Bucket {
		if math.IsInf(b.GetUpperBound(), 1) {
			break
		}
		last = b.GetUpperBound()
		if float64(b.GetCumulativeCount()) >= rank {
			return last
		}
	}
	return last
}
