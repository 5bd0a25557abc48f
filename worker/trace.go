package worker

import (
	"context"
	"time"

	"github.com/hourglass-sched/hourglass/internal/tracectx"
)

// startTrace starts the trace of this attempt's handler (docs/tracing.md,
// tracectx.StartAttempt): the child of the producer's trace the task
// carries, linked to its last failed attempt, with the task's id, queue,
// attempt, lateness (late) and priority. It returns the ctx for the
// handler and the function that ends the trace with the handler's
// result. The attempt's id is kept for the nack of a failed attempt,
// which the next attempt links to (failedLink).
func (d *delivery) startTrace(ctx context.Context, late time.Duration) (context.Context, func(error)) {
	t := d.sd.Task
	ctx, s, id := tracectx.StartAttempt(ctx, d.tracer, t.Queue, t.TraceParent, t.TraceLink,
		tracectx.System.String(tracectx.SystemName),
		tracectx.Operation.String("process"),
		tracectx.Destination.String(t.Queue),
		tracectx.MessageID.String(t.ID),
		tracectx.Attempt.Int(d.task.Attempt),
		tracectx.LatenessMs.Float64(float64(late)/float64(time.Millisecond)),
		tracectx.Priority.String(t.Priority.String()),
	)
	if id != "" {
		d.traceLink.Store(&id)
	}
	return ctx, func(err error) { tracectx.End(s, err) }
}

// failedLink returns what the next attempt links to should this one
// fail: its trace id in hex, "" when it is not traced.
func (d *delivery) failedLink() string {
	if p := d.traceLink.Load(); p != nil {
		return *p
	}
	return ""
}
