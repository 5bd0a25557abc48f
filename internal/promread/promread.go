// Package promread reads figures back from Hourglass's /metrics
// endpoints: it merges a histogram across several processes and estimates
// its quantiles the way Prometheus's histogram_quantile does. The local
// demo, the end-to-end tests and the benchmarks use it; the binaries
// themselves only export.
package promread

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// ErrNoFamily reports a metric family that the scraped process does not
// export: a misspelt name, or a series never created. Readers fail on it
// rather than read it as zero.
var ErrNoFamily = errors.New("promread: metric family not exported")

// Families fetches and parses one /metrics URL.
func Families(ctx context.Context, url string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("promread: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("promread: %s: status %d", url, resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("promread: parse %s: %w", url, err)
	}
	return fams, nil
}

// Histogram is a histogram merged over processes and label sets.
type Histogram struct {
	// Bounds are the buckets' upper bounds, ascending (+Inf last if present).
	Bounds []float64
	// Cumulative holds the count of observations <= each bound.
	Cumulative []uint64
	// Count and Sum are the totals.
	Count uint64
	Sum   float64
}

// Add merges every series of histogram family name in fams into h. It
// returns an error wrapping ErrNoFamily when fams has no such family, and
// an error when the family is not a histogram; h is then unchanged.
func (h *Histogram) Add(fams map[string]*dto.MetricFamily, name string) error {
	f := fams[name]
	if f == nil {
		return fmt.Errorf("%w: %s", ErrNoFamily, name)
	}
	if f.GetType() != dto.MetricType_HISTOGRAM {
		return fmt.Errorf("promread: %s is a %s, not a histogram", name, f.GetType())
	}
	agg := map[float64]uint64{}
	for i, b := range h.Bounds {
		agg[b] = h.Cumulative[i]
	}
	for _, m := range f.Metric {
		hist := m.GetHistogram()
		if hist == nil {
			continue
		}
		h.Count += hist.GetSampleCount()
		h.Sum += hist.GetSampleSum()
		for _, b := range hist.Bucket {
			agg[b.GetUpperBound()] += b.GetCumulativeCount()
		}
	}
	h.Bounds = h.Bounds[:0]
	for b := range agg {
		h.Bounds = append(h.Bounds, b)
	}
	sort.Float64s(h.Bounds)
	h.Cumulative = make([]uint64, len(h.Bounds))
	for i, b := range h.Bounds {
		h.Cumulative[i] = agg[b]
	}
	return nil
}

// Sub returns h minus an earlier snapshot of the same histogram: the
// observations made in between.
func (h Histogram) Sub(earlier Histogram) Histogram {
	prev := map[float64]uint64{}
	for i, b := range earlier.Bounds {
		prev[b] = earlier.Cumulative[i]
	}
	out := Histogram{Count: h.Count - earlier.Count, Sum: h.Sum - earlier.Sum, Bounds: append([]float64(nil), h.Bounds...)}
	out.Cumulative = make([]uint64, len(h.Bounds))
	for i, b := range h.Bounds {
		out.Cumulative[i] = h.Cumulative[i] - prev[b]
	}
	return out
}

// Quantile estimates the q-quantile (0..1) by linear interpolation inside
// the bucket that holds it. It returns 0 for an empty histogram and the
// highest finite bound when the quantile falls in the +Inf bucket.
func (h Histogram) Quantile(q float64) float64 {
	if h.Count == 0 || len(h.Bounds) == 0 {
		return 0
	}
	rank := q * float64(h.Count)
	prevB, prevC := 0.0, uint64(0)
	for i, b := range h.Bounds {
		c := h.Cumulative[i]
		if float64(c) >= rank && c > prevC {
			if b > 1e300 { // +Inf bucket
				return prevB
			}
			return prevB + (b-prevB)*(rank-float64(prevC))/float64(c-prevC)
		}
		prevB, prevC = b, c
	}
	return prevB
}

// Scrape merges histogram name over the given /metrics URLs. A URL that
// does not export it is an error (wrapping ErrNoFamily).
func Scrape(ctx context.Context, name string, urls ...string) (Histogram, error) {
	var h Histogram
	for _, u := range urls {
		fams, err := Families(ctx, u)
		if err != nil {
			return h, err
		}
		if err := h.Add(fams, name); err != nil {
			return h, fmt.Errorf("%w (%s)", err, u)
		}
	}
	return h, nil
}

// Counter sums every series of counter or gauge family name in fams. It
// returns an error wrapping ErrNoFamily when fams has no such family, and
// an error when the family is neither a counter nor a gauge.
func Counter(fams map[string]*dto.MetricFamily, name string) (float64, error) {
	f := fams[name]
	if f == nil {
		return 0, fmt.Errorf("%w: %s", ErrNoFamily, name)
	}
	if t := f.GetType(); t != dto.MetricType_COUNTER && t != dto.MetricType_GAUGE {
		return 0, fmt.Errorf("promread: %s is a %s, not a counter or gauge", name, t)
	}
	var sum float64
	for _, m := range f.Metric {
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return sum, nil
}
