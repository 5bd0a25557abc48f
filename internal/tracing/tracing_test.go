package tracing

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestOTLPEndpoint: spans go to the collector's /v1/traces when the
// endpoint names no path (the exporter alone would post to "/"), and to
// the path given otherwise; they are flushed by the shutdown.
func TestOTLPEndpoint(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	for endpoint, want := range map[string]string{srv.URL: "/v1/traces", srv.URL + "/": "/v1/traces", srv.URL + "/custom/traces": "/custom/traces"} {
		mu.Lock()
		paths = nil
		mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		tp, flush, err := New(ctx, Config{Exporter: ExporterOTLP, Endpoint: endpoint}, "test", "v0")
		if err != nil {
			t.Fatal(err)
		}
		_, span := tp.Tracer("t").Start(ctx, "s")
		span.End()
		if err := flush(ctx); err != nil {
			t.Fatalf("%s: flush: %v", endpoint, err)
		}
		cancel()
		mu.Lock()
		got := strings.Join(paths, ",")
		mu.Unlock()
		if got != want {
			t.Errorf("endpoint %s: posted to %q, want %q", endpoint, got, want)
		}
	}
}

// TestFileAndOff: the file exporter appends one JSON line a span; no
// exporter is ErrOff, an unknown one an error.
func TestFileAndOff(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "spans.jsonl")
	tp, flush, err := New(context.Background(), Config{Exporter: ExporterFile, File: path}, "test", "v0")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		_, span := tp.Tracer("t").Start(context.Background(), name)
		span.End()
	}
	if err := flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || strings.Count(string(b), "\n") != 2 || !strings.Contains(string(b), `"Name":"a"`) {
		t.Fatalf("file: %q %v", b, err)
	}
	if _, _, err := New(context.Background(), Config{}, "test", "v0"); !errors.Is(err, ErrOff) {
		t.Fatalf("no exporter: %v", err)
	}
	if _, _, err := New(context.Background(), Config{Exporter: "jaeger"}, "test", "v0"); err == nil {
		t.Fatal("an unknown exporter was accepted")
	}
}
