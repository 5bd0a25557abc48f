package promread

import (
	"context"
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
	if err != nil || Counter(fams, "n_total") != 3 {
		t.Fatalf("counter: %v %v", Counter(fams, "n_total"), err)
	}
	d := h.Sub(h)
	if d.Count != 0 || d.Quantile(0.5) != 0 {
		t.Fatalf("h - h = %+v", d)
	}
}

func TestFamiliesErrors(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	if _, err := Families(context.Background(), srv.URL); err == nil {
		t.Fatal("404 accepted")
	}
}
