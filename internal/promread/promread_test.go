package promread

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func serve(t *testing.T, obs []float64, counter float64) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "lat_seconds", Help: "x", Buckets: []float64{1, 2, 4, 8}})
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "n_total", Help: "x"})
	reg.MustRegister(h, c)
	for _, o := range obs {
		h.Observe(o)
	}
	c.Add(counter)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestScrapeMergesAndEstimates(t *testing.T) {
	t.Parallel()
	a := serve(t, []float64{0.5, 0.5, 1.5, 3}, 2)
	b := serve(t, []float64{0.5, 1.5, 3, 7, 100}, 3)
	h, err := Scrape(context.Background(), "lat_seconds", a, b)
	if err != nil {
		t.Fatal(err)
	}
	if h.Count != 9 {
		t.Fatalf("count = %d, want 9", h.Count)
	}
	// 3 of 9 observations are <= 1: the median lies in (1,2].
	if q := h.Quantile(0.5); q <= 1 || q > 2 {
		t.Fatalf("p50 = %v, want in (1,2]", q)
	}
	if q := h.Quantile(0.99); q != 8 {
		t.Fatalf("p99 = %v, want 8 (highest finite bound)", q)
	}
	if q := (Histogram{}).Quantile(0.5); q != 0 || math.IsNaN(q) {
		t.Fatalf("empty quantile = %v", q)
	}
	fams, err := Families(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := Counter(fams, "n_total"); n != 3 || err != nil {
		t.Fatalf("counter: %v %v", n, err)
	}
	d := h.Sub(h)
	if d.Count != 0 || d.Quantile(0.5) != 0 {
		t.Fatalf("h - h = %+v", d)
	}
}

func TestFamiliesErrors(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	if _, err := Families(context.Background(), srv.URL); err == nil {
		t.Fatal("404 accepted")
	}
}

// TestMissingFamilyIsAnError: a family the process does not export, or
// one of another type, is an error, never a zero.
func TestMissingFamilyIsAnError(t *testing.T) {
	t.Parallel()
	u := serve(t, []float64{1}, 1)
	if _, err := Scrape(context.Background(), "nope_seconds", u); !errors.Is(err, ErrNoFamily) {
		t.Fatalf("Scrape of a missing histogram: %v, want ErrNoFamily", err)
	}
	fams, err := Families(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	var h Histogram
	if err := h.Add(fams, "nope_seconds"); !errors.Is(err, ErrNoFamily) {
		t.Fatalf("Add of a missing histogram: %v, want ErrNoFamily", err)
	}
	if err := h.Add(fams, "n_total"); err == nil || h.Count != 0 {
		t.Fatalf("Add of a counter: %v (count %d), want an error", err, h.Count)
	}
	if _, err := Counter(fams, "nope_total"); !errors.Is(err, ErrNoFamily) {
		t.Fatalf("Counter of a missing family: %v, want ErrNoFamily", err)
	}
	if _, err := Counter(fams, "lat_seconds"); err == nil {
		t.Fatal("Counter of a histogram: no error")
	}
}
