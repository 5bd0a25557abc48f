package executor_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/hourglass-sched/hourglass/internal/config"
	"github.com/hourglass-sched/hourglass/internal/executor"
	"github.com/hourglass-sched/hourglass/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// task returns a task as the worker would hand it to a handler.
func task(payload string) *worker.Task {
	return &worker.Task{
		ID:       "order-42",
		Queue:    "webhooks",
		Payload:  []byte(payload),
		Attempt:  3,
		Due:      time.Date(2026, 1, 2, 3, 4, 5, 678_000_000, time.FixedZone("CET", 3600)),
		Enqueued: time.UnixMilli(1767316000123),
	}
}

// request is what the test server saw.
type request struct {
	method, path string
	header       http.Header
	body         string
}

// server answers with respond and records each request on the returned
// channel.
func server(t *testing.T, respond func(w http.ResponseWriter, r *http.Request)) (*httptest.Server, <-chan request) {
	t.Helper()
	seen := make(chan request, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		seen <- request{r.Method, r.URL.Path, r.Header.Clone(), string(b)}
		respond(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, seen
}

func status(code int, header ...string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(code)
	}
}

func TestHTTPAckSendsTaskAndHeaders(t *testing.T) {
	t.Parallel()
	srv, seen := server(t, status(http.StatusNoContent))
	h := executor.HTTP(config.HTTPTarget{
		URL: srv.URL + "/hook",
		Headers: map[string]string{
			"Authorization":     "Bearer t0k3n",
			"x-tenant":          "7",
			"Hourglass-Task-Id": "spoofed", // cannot replace a task header
		},
	}, srv.Client())
	if err := h(context.Background(), task("hello")); err != nil {
		t.Fatalf("204: got %v, want nil (ack)", err)
	}
	r := <-seen
	if r.method != http.MethodPost || r.path != "/hook" || r.body != "hello" {
		t.Errorf("request = %s %s %q, want POST /hook \"hello\"", r.method, r.path, r.body)
	}
	want := map[string]string{
		"Content-Type":          "application/octet-stream",
		"Hourglass-Task-Id":     "order-42",
		"Hourglass-Queue":       "webhooks",
		"Hourglass-Attempt":     "3",
		"Hourglass-Due":         "2026-01-02T02:04:05.678Z",
		"Hourglass-Due-Ms":      "1767319445678",
		"Hourglass-Enqueued-Ms": "1767316000123",
		"Authorization":         "Bearer t0k3n",
		"X-Tenant":              "7",
	}
	for name, v := range want {
		if got := r.header.Values(name); len(got) != 1 || got[0] != v {
			t.Errorf("header %s = %q, want [%q]", name, got, v)
		}
	}
}

func TestHTTPMethodAndContentType(t *testing.T) {
	t.Parallel()
	srv, seen := server(t, status(http.StatusOK))
	h := executor.HTTP(config.HTTPTarget{
		URL: srv.URL, Method: "PUT", Headers: map[string]string{"content-type": "application/json"},
	}, srv.Client())
	if err := h(context.Background(), task(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	r := <-seen
	if r.method != http.MethodPut || r.header.Get("Content-Type") != "application/json" || r.body != `{"a":1}` {
		t.Errorf("request = %s %q %q", r.method, r.header.Get("Content-Type"), r.body)
	}
}

func TestHTTPResults(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 300)
	tests := []struct {
		name    string
		respond func(http.ResponseWriter, *http.Request)
		want    []string // fragments; nil means success
		notWant []string
	}{
		{"200", status(http.StatusOK), nil, nil},
		{"2xx wins over Retry-After", status(http.StatusAccepted, "Retry-After", "7"), nil, nil},
		{"503 with Retry-After seconds", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "busy\n")
		}, []string{"retry after 7s", "http 503: busy"}, []string{"not retryable"}},
		{"429 with Retry-After date", status(http.StatusTooManyRequests,
			"Retry-After", time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)),
			[]string{"retry after ", "http 429"}, []string{"retry after 0s"}},
		{"Retry-After date in the past", status(http.StatusTooManyRequests, "Retry-After", "Mon, 02 Jan 2006 15:04:05 GMT"),
			[]string{"retry after 0s", "http 429"}, nil},
		{"500 with Retry-After", status(http.StatusInternalServerError, "Retry-After", "120"),
			[]string{"retry after 2m0s", "http 500"}, nil},
		{"invalid Retry-After is ignored", status(http.StatusServiceUnavailable, "Retry-After", "soon"),
			[]string{"http 503"}, []string{"retry after"}},
		{"500 with body excerpt", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, long)
		}, []string{"http 500: " + long[:256]}, []string{long[:257]}},
		{"404", status(http.StatusNotFound), []string{"http 404"}, []string{"retry after"}},
		{"redirect not followed is a failure", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusNotModified)
		}, []string{"http 304"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, _ := server(t, tt.respond)
			err := executor.HTTP(config.HTTPTarget{URL: srv.URL}, srv.Client())(context.Background(), task("p"))
			if tt.want == nil {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("got nil, want an error containing %q", tt.want)
			}
			for _, f := range tt.want {
				if !strings.Contains(err.Error(), f) {
					t.Errorf("error %q does not contain %q", err, f)
				}
			}
			for _, f := range tt.notWant {
				if strings.Contains(err.Error(), f) {
					t.Errorf("error %q contains %q", err, f)
				}
			}
		})
	}
}

func TestHTTPTransportError(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url, client := srv.URL, srv.Client()
	srv.Close() // nothing listens there now
	err := executor.HTTP(config.HTTPTarget{URL: url + "/x"}, client)(context.Background(), task("p"))
	if err == nil || !strings.HasPrefix(err.Error(), "http: ") || !strings.Contains(err.Error(), "/x") {
		t.Fatalf("got %v, want a wrapped transport error naming the URL", err)
	}
}

func TestHTTPUsesCtx(t *testing.T) {
	t.Parallel()
	srv, _ := server(t, func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // never answers
	})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := executor.HTTP(config.HTTPTarget{URL: srv.URL}, srv.Client())(ctx, task("p"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want an error wrapping context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("returned after %s", d)
	}
}
