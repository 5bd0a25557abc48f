package worker

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/hourglass-sched/hourglass/internal/tracectx"
)

// startSpan starts the span of this attempt's handler (docs/tracing.md):
// the child of the producer's span the task carries, or the root of a
// new trace, linked to the task's last failed attempt. late is the
// attempt's lateness. The span's id is kept for the nack of a failed
// attempt (the next attempt links to it).
func (d *delivery) startSpan(ctx context.Context, late time.Duration) (context.Context, trace.Span) {
	t := d.sd.Task
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			tracectx.System.String(tracectx.SystemName),
			tracectx.Operation.String("process"),
			tracectx.Destination.String(t.Queue),
			tracectx.MessageID.String(t.ID),
			tracectx.Attempt.Int(d.task.Attempt),
			tracectx.LatenessMs.Float64(float64(late)/float64(time.Millisecond)),
			tracectx.Priority.String(t.Priority.String()),
		),
	}
	if parent, ok := tracectx.Parse(t.TraceParent); ok {
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
		if l, ok := tracectx.Link(parent, t.TraceLink); ok {
			opts = append(opts, trace.WithLinks(l))
		}
	} else {
		opts = append(opts, trace.WithNewRoot())
	}
	ctx, span := d.tracer.Start(ctx, "process "+t.Queue, opts...)
	if sc := span.SpanContext(); sc.IsValid() {
		id := sc.SpanID().String()
		d.spanID.Store(&id)
	}
	return ctx, span
}

// endSpan ends the span of an attempt whose handler returned err.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// attemptSpan returns the span id of this attempt, "" when it has none,
// for the nack of a failed attempt.
func (d *delivery) attemptSpan() string {
	if p := d.spanID.Load(); p != nil {
		return *p
	}
	return ""
}
