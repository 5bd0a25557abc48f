package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// attr returns the value of span s's attribute key as text, "" if none.
func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, a := range s.Attributes() {
		if string(a.Key) == key {
			return a.Value.Emit()
		}
	}
	return ""
}

// TestTraceFromEnqueueToHandler: with tracing on in the producer and the
// worker (the SDK's in-memory exporter), a task's attempts run in spans
// that are children of the producer's enqueue span, itself the child of
// the caller's span; they carry the task's id, queue, attempt and
// lateness, the handler's ctx holds them, a failed attempt's span says
// so, and the retry's span links to it. A task from a producer without
// tracing starts a trace of its own; a worker without tracing runs a
// traced task's handler with its payload whole and no span.
func TestTraceFromEnqueueToHandler(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	e := newEnv(t, shard.QueuePolicy{MaxRetries: 3, Timeout: 30 * time.Second, Backoff: shard.Backoff{Base: 10 * time.Millisecond, Cap: 10 * time.Millisecond, Factor: 1}})
	traced, err := client.New(e.RDB, client.Config{Namespace: ns, Shards: shards, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := client.New(e.RDB, client.Config{Namespace: ns, Shards: shards})
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	inHandler := map[string][]trace.SpanContext{} // task id -> the span in each attempt's ctx
	payloads := map[string]string{}
	done := make(chan string, 10)
	handler := func(ctx context.Context, task *Task) error {
		mu.Lock()
		inHandler[task.ID] = append(inHandler[task.ID], trace.SpanContextFromContext(ctx))
		payloads[task.ID] = string(task.Payload)
		mu.Unlock()
		if task.ID == "retried" && task.Attempt == 1 {
			return errors.New("first attempt fails")
		}
		done <- task.ID
		return nil
	}
	_, _, stop := e.start(e.RDB, QueueOptions{}, handler, func(c *Config) { c.TracerProvider = tp })

	ctx := testenv.Ctx(t, 30*time.Second)
	rctx, root := tp.Tracer("test").Start(ctx, "request")
	if _, err := traced.Enqueue(rctx, client.Task{ID: "retried", Queue: "q", Payload: []byte("order-1")}); err != nil {
		t.Fatal(err)
	}
	root.End()
	if _, err := plain.Enqueue(ctx, client.Task{ID: "untraced", Queue: "q", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case <-done:
		case <-ctx.Done():
			t.Fatal("tasks not done")
		}
	}
	spans := map[string][]sdktrace.ReadOnlySpan{}
	testenv.WaitFor(t, 10*time.Second, "the spans of three attempts and an enqueue", func() (bool, string) {
		spans = map[string][]sdktrace.ReadOnlySpan{}
		for _, s := range exp.GetSpans().Snapshots() {
			spans[s.Name()] = append(spans[s.Name()], s)
		}
		return len(spans["process q"]) == 3 && len(spans["enqueue q"]) == 1, fmt.Sprint(len(spans["process q"]), " process spans")
	})
	enq := spans["enqueue q"][0]
	if enq.Parent().SpanID() != root.SpanContext().SpanID() || enq.SpanKind() != trace.SpanKindProducer || attr(enq, "messaging.message.id") != "retried" {
		t.Fatalf("enqueue span: parent %v (want %v), kind %v, attrs %v", enq.Parent().SpanID(), root.SpanContext().SpanID(), enq.SpanKind(), enq.Attributes())
	}
	var attempts []sdktrace.ReadOnlySpan
	var own sdktrace.ReadOnlySpan
	for _, s := range spans["process q"] {
		switch attr(s, "messaging.message.id") {
		case "retried":
			attempts = append(attempts, s)
		case "untraced":
			own = s
		}
	}
	if len(attempts) != 2 || own == nil {
		t.Fatalf("process spans: %d of the traced task, untraced one %v", len(attempts), own)
	}
	if attr(attempts[0], "hourglass.task.attempt") != "1" {
		attempts[0], attempts[1] = attempts[1], attempts[0]
	}
	first, second := attempts[0], attempts[1]
	mu.Lock()
	defer mu.Unlock()
	for i, s := range attempts {
		if s.SpanContext().TraceID() != root.SpanContext().TraceID() || s.Parent().SpanID() != enq.SpanContext().SpanID() ||
			s.SpanKind() != trace.SpanKindConsumer || attr(s, "messaging.destination.name") != "q" ||
			attr(s, "hourglass.task.attempt") != fmt.Sprint(i+1) || attr(s, "hourglass.task.lateness_ms") == "" {
			t.Errorf("attempt %d: trace %v parent %v kind %v attrs %v; want trace %v parent %v", i+1, s.SpanContext().TraceID(), s.Parent().SpanID(),
				s.SpanKind(), s.Attributes(), root.SpanContext().TraceID(), enq.SpanContext().SpanID())
		}
		if got := inHandler["retried"][i]; got.SpanID() != s.SpanContext().SpanID() {
			t.Errorf("attempt %d: the handler's ctx holds span %v, want %v", i+1, got.SpanID(), s.SpanContext().SpanID())
		}
	}
	if first.Status().Code != codes.Error || second.Status().Code == codes.Error {
		t.Errorf("statuses: first %v, second %v", first.Status(), second.Status())
	}
	if l := second.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != first.SpanContext().SpanID() || len(first.Links()) != 0 {
		t.Errorf("the retry's links %+v, want one to the first attempt %v", l, first.SpanContext().SpanID())
	}
	if own.Parent().IsValid() || own.SpanContext().TraceID() == root.SpanContext().TraceID() {
		t.Errorf("an untraced task's span has parent %v in trace %v", own.Parent(), own.SpanContext().TraceID())
	}
	if payloads["retried"] != "order-1" {
		t.Errorf("the handler got payload %q", payloads["retried"])
	}

	// A worker without tracing: no span, the payload whole.
	stop()
	e.start(e.RDB, QueueOptions{}, handler)
	if _, err := traced.Enqueue(ctx, client.Task{ID: "offworker", Queue: "q", Payload: []byte("order-2")}); err != nil {
		t.Fatal(err)
	}
	mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("offworker not done")
	}
	mu.Lock()
	if sc := inHandler["offworker"]; len(sc) != 1 || sc[0].IsValid() || payloads["offworker"] != "order-2" {
		t.Errorf("a worker without tracing: span %v, payload %q", sc, payloads["offworker"])
	}
}
