package client

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/hourglass-sched/hourglass/internal/tracectx"
)

// enqueueTraced is EnqueueBatch with tracing on: the call is a span, a
// child of ctx's span, and its tasks carry the span's context
// (docs/tracing.md).
func (c *Client) enqueueTraced(ctx context.Context, tasks []Task) ([]Result, error) {
	name, attrs := "enqueue", []attribute.KeyValue{
		tracectx.System.String(tracectx.SystemName),
		tracectx.Operation.String("send"),
	}
	if q := sameQueue(tasks); q != "" {
		name += " " + q
		attrs = append(attrs, tracectx.Destination.String(q))
	}
	if len(tasks) == 1 && tasks[0].ID != "" {
		attrs = append(attrs, tracectx.MessageID.String(tasks[0].ID))
	}
	if len(tasks) != 1 {
		attrs = append(attrs, tracectx.BatchCount.Int(len(tasks)))
	}
	ctx, span := c.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
	out, err := c.enqueueBatch(ctx, tasks, tracectx.Format(span.SpanContext()))
	if len(out) == 1 && tasks[0].ID == "" {
		span.SetAttributes(tracectx.MessageID.String(out[0].ID)) // generated
	}
	tracectx.End(span, err)
	return out, err
}

// sameQueue returns the queue of every task, "" when they have several.
func sameQueue(tasks []Task) string {
	if len(tasks) == 0 {
		return ""
	}
	for _, t := range tasks[1:] {
		if t.Queue != tasks[0].Queue {
			return ""
		}
	}
	return tasks[0].Queue
}
