// Package tracectx carries OpenTelemetry span contexts in the W3C
// traceparent form a task stores (docs/protocol.md, "Traces"), and names
// the attributes of Hourglass's spans (docs/tracing.md). It uses the
// OpenTelemetry API only: the SDK and its exporters are the program's
// choice (the worker binary's are in internal/tracing).
package tracectx

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Instrumentation is the name of Hourglass's tracer (the scope of its
// spans).
const Instrumentation = "github.com/hourglass-sched/hourglass"

// Attribute keys of Hourglass's spans. The messaging ones are those of
// OpenTelemetry's messaging conventions; the hourglass ones are ours.
const (
	System      = attribute.Key("messaging.system")
	Destination = attribute.Key("messaging.destination.name")
	MessageID   = attribute.Key("messaging.message.id")
	Operation   = attribute.Key("messaging.operation.type")
	BatchCount  = attribute.Key("messaging.batch.message_count")
	Attempt     = attribute.Key("hourglass.task.attempt")
	LatenessMs  = attribute.Key("hourglass.task.lateness_ms")
	Priority    = attribute.Key("hourglass.task.priority")
)

// SystemName is the value of System on Hourglass's spans.
const SystemName = "hourglass"

// Format renders sc as a W3C traceparent of version 00, "" when sc is
// not valid.
func Format(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	tid, sid := sc.TraceID(), sc.SpanID()
	const hexd = "0123456789abcdef"
	b := make([]byte, 0, 55)
	b = append(b, "00-"...)
	for _, c := range tid {
		b = append(b, hexd[c>>4], hexd[c&15])
	}
	b = append(b, '-')
	for _, c := range sid {
		b = append(b, hexd[c>>4], hexd[c&15])
	}
	f := byte(sc.TraceFlags())
	return string(append(b, '-', hexd[f>>4], hexd[f&15]))
}

// Parse reads a traceparent as stored with a task (Format's form; any
// version but ff, as W3C's rule for a receiver) into a remote span
// context; ok is false for one that is malformed or names the invalid
// (zero) trace or span.
func Parse(s string) (sc trace.SpanContext, ok bool) {
	if len(s) < 55 || s[2] != '-' || s[35] != '-' || s[52] != '-' || s[:2] == "ff" || (len(s) > 55 && s[55] != '-') {
		return sc, false
	}
	tid, err := trace.TraceIDFromHex(s[3:35])
	if err != nil {
		return sc, false
	}
	sid, err := trace.SpanIDFromHex(s[36:52])
	if err != nil {
		return sc, false
	}
	flags, ok := hexByte(s[53], s[54])
	if !ok {
		return sc, false
	}
	sc = trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(flags) & trace.FlagsSampled, Remote: true})
	return sc, sc.IsValid()
}

// Link returns the link from an attempt to the span id (16 hex digits)
// of the task's last failed attempt in trace sc; ok is false when there
// is none to link.
func Link(sc trace.SpanContext, span string) (l trace.Link, ok bool) {
	sid, err := trace.SpanIDFromHex(span)
	if err != nil || !sc.IsValid() {
		return l, false
	}
	prev := trace.NewSpanContext(trace.SpanContextConfig{TraceID: sc.TraceID(), SpanID: sid, TraceFlags: sc.TraceFlags(), Remote: true})
	return trace.Link{SpanContext: prev, Attributes: []attribute.KeyValue{attribute.String("hourglass.link", "previous attempt")}}, true
}

func hexByte(hi, lo byte) (byte, bool) {
	h, ok1 := hexVal(hi)
	l, ok2 := hexVal(lo)
	return h<<4 | l, ok1 && ok2
}

func hexVal(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// StartAttempt starts the span of one attempt of a task of queue,
// "process <queue>" of kind consumer with attrs: the child of the
// producer's span traceParent names, linked to the span of the task's
// last failed attempt (link, 16 hex digits), or, without a valid
// traceParent, the root of a trace of its own. It returns the ctx that
// holds the span, the span, and its id in hex ("" when it has none), for
// the nack of a failed attempt.
func StartAttempt(ctx context.Context, tr trace.Tracer, queue, traceParent, link string, attrs ...attribute.KeyValue) (context.Context, trace.Span, string) {
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...)}
	if parent, ok := Parse(traceParent); ok {
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
		if l, ok := Link(parent, link); ok {
			opts = append(opts, trace.WithLinks(l))
		}
	} else {
		opts = append(opts, trace.WithNewRoot())
	}
	ctx, s := tr.Start(ctx, "process "+queue, opts...)
	id := ""
	if sc := s.SpanContext(); sc.IsValid() {
		id = sc.SpanID().String()
	}
	return ctx, s, id
}

// End ends span s of an operation that returned err: an error is
// recorded and makes the span's status Error.
func End(s trace.Span, err error) {
	if err != nil {
		s.RecordError(err)
		s.SetStatus(codes.Error, err.Error())
	}
	s.End()
}
