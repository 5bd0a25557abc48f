package shard

// The trace context of a traced task (docs/protocol.md, "Traces"): its
// data's max_retries field has the flag traceFlag, and its payload area
// starts with the producer's W3C traceparent, "-" and the span id of the
// task's last failed attempt (16 zeros before one failed); lib.lua's
// prio_split and trace_len read it the same way.
const (
	// traceFlag marks traced task data in its max_retries field, below
	// the priority level (priorityShift).
	traceFlag = 8192
	// TraceParentLen is the length of a W3C traceparent of version 00:
	// "00-" 32 hex digits "-" 16 hex digits "-" 2 hex digits.
	TraceParentLen = 55
	// traceLen is the length of the trace context in the payload area.
	traceLen = TraceParentLen + 1 + 16
	// noLink is the link slot of a task no attempt of which failed yet.
	noLink = "0000000000000000"
)

// ValidTraceParent reports whether s has the form of a W3C traceparent
// that enqueue.lua accepts: 55 bytes, "vv-<32 hex>-<16 hex>-<2 hex>",
// lowercase.
func ValidTraceParent(s string) bool {
	if len(s) != TraceParentLen || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return false
	}
	return isHex(s[0:2]) && isHex(s[3:35]) && isHex(s[36:52]) && isHex(s[53:55])
}

// isHex reports whether s is lowercase hex digits only (W3C's rule).
func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// ValidSpanID reports whether s is a span id as NackArgs.TraceLink takes it:
// 16 lowercase hex digits.
func ValidSpanID(s string) bool { return len(s) == 16 && isHex(s) }

// splitTrace splits the trace context off the payload area p of data
// whose flag says it is traced: the traceparent, the last failed
// attempt's span id ("" for none) and the payload. Data whose context
// is not well formed (a hand edit) keeps its whole payload area as its
// payload, as lib.lua's traced_at keeps data too short for one.
func splitTrace(p []byte) (parent, link string, payload []byte) {
	if len(p) < traceLen {
		return "", "", p
	}
	parent, link = string(p[:TraceParentLen]), string(p[TraceParentLen+1:traceLen])
	if !ValidTraceParent(parent) || p[TraceParentLen] != '-' || !ValidSpanID(link) {
		return "", "", p
	}
	if link == noLink {
		link = ""
	}
	return parent, link, p[traceLen:]
}

// traceContext renders the trace context of t for its data, "" when t
// has no TraceParent.
func traceContext(t Task) string {
	if t.TraceParent == "" {
		return ""
	}
	link := noLink
	if t.TraceLink != "" {
		link = t.TraceLink
	}
	return t.TraceParent + "-" + link
}

// withTrace moves the trace context of traced data from t.Payload to
// t.TraceParent and t.TraceLink.
func withTrace(t Task, traced bool) Task {
	if traced {
		t.TraceParent, t.TraceLink, t.Payload = splitTrace(t.Payload)
	}
	return t
}
