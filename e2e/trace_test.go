package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// exportedSpan is what the worker binary's file exporter writes of a span
// (stdouttrace's JSON), as far as the test reads it.
type exportedSpan struct {
	Name        string
	SpanContext struct{ TraceID, SpanID string }
	Parent      struct{ TraceID, SpanID string }
	Attributes  []struct {
		Key   string
		Value struct{ Value any }
	}
	Links []struct {
		SpanContext struct{ TraceID, SpanID string }
	}
	Status struct{ Code string }
}

func (s exportedSpan) attr(key string) string {
	for _, a := range s.Attributes {
		if a.Key == key {
			return strings.Trim(strings.TrimSpace(jsonText(a.Value.Value)), `"`)
		}
	}
	return ""
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestTraceAcrossProcesses (#29): one trace from a producer's Enqueue (in
// this process, the SDK's in-memory exporter) through the worker binary
// (worker.tracing.exporter file) to the HTTP target, which gets the
// handler span's traceparent; the task fails once, and the retry's span
// is in the same trace, the child of the same enqueue span, linked to the
// failed attempt's span.
func TestTraceAcrossProcesses(t *testing.T) {
	testenv.Parallel(t)
	c := newCluster(t)
	tg := newTarget(t)
	var mu sync.Mutex
	var parents []string // the traceparent header of each attempt
	tg.setBehave(func(w http.ResponseWriter, r *http.Request, id string, attempt int) bool {
		mu.Lock()
		parents = append(parents, r.Header.Get("Traceparent"))
		mu.Unlock()
		if attempt == 1 {
			http.Error(w, "first attempt fails", http.StatusInternalServerError)
			return true
		}
		return false
	})
	spansFile := filepath.Join(t.TempDir(), "spans.jsonl")
	args := append(workerArgs(tg.URL, 5*time.Second, 4),
		"-set", "queues.default.backoff.base=100ms", "-set", "queues.default.backoff.cap=100ms")
	c.start("t-s", args...)
	testenv.WaitFor(t, 20*time.Second, "the scheduler owns all shards", func() (bool, string) { return c.settled("t-s") })
	w := c.startWorker("t-w", append(args, "-set", "worker.tracing.exporter=file", "-set", "worker.tracing.file="+spansFile)...)

	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	producer, err := client.New(c.rdb, client.Config{Shards: nShards, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Ctx(t, time.Minute)
	if _, err := producer.Enqueue(ctx, client.Task{ID: "traced-1", Queue: "default", Payload: []byte("order")}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "two attempts at the target", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(parents) == 2, strings.Join(parents, ", ")
	})
	testenv.WaitFor(t, 10*time.Second, "the task acknowledged", func() (bool, string) {
		_, err := producer.Lookup(ctx, "traced-1")
		return err != nil, "still stored"
	})
	if err := w.Terminate(10 * time.Second); err != nil { // flushes the spans
		t.Fatal(err)
	}
	enq := exp.GetSpans().Snapshots()
	if len(enq) != 1 || enq[0].Name() != "enqueue default" {
		t.Fatalf("producer spans: %v", enq)
	}
	traceID, enqID := enq[0].SpanContext().TraceID().String(), enq[0].SpanContext().SpanID().String()

	f, err := os.Open(spansFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var attempts []exportedSpan
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var s exportedSpan
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatalf("span %q: %v", sc.Text(), err)
		}
		if s.Name == "process default" {
			attempts = append(attempts, s)
		}
	}
	if len(attempts) != 2 {
		t.Fatalf("the worker exported %d process spans, want 2", len(attempts))
	}
	if attempts[0].attr("hourglass.task.attempt") != "1" {
		attempts[0], attempts[1] = attempts[1], attempts[0]
	}
	for i, s := range attempts {
		t.Logf("attempt %d: trace %s span %s parent %s status %s attributes %v links %v", i+1, s.SpanContext.TraceID, s.SpanContext.SpanID, s.Parent.SpanID, s.Status.Code, s.Attributes, s.Links)
		if s.SpanContext.TraceID != traceID || s.Parent.SpanID != enqID || s.attr("messaging.message.id") != "traced-1" {
			t.Errorf("attempt %d: trace %s parent %s id %q; want trace %s parent %s", i+1, s.SpanContext.TraceID, s.Parent.SpanID, s.attr("messaging.message.id"), traceID, enqID)
		}
		mu.Lock()
		if want := "00-" + traceID + "-" + s.SpanContext.SpanID + "-01"; parents[i] != want {
			t.Errorf("attempt %d: the target got traceparent %q, want %q", i+1, parents[i], want)
		}
		mu.Unlock()
	}
	if attempts[0].Status.Code != "Error" {
		t.Errorf("the failed attempt's status is %q", attempts[0].Status.Code)
	}
	if l := attempts[1].Links; len(l) != 1 || l[0].SpanContext.SpanID != attempts[0].SpanContext.SpanID {
		t.Errorf("the retry's links %+v, want one to %s", l, attempts[0].SpanContext.SpanID)
	}
}
