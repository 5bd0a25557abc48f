package shard

import "github.com/hourglass-sched/hourglass"

// Priority is a task's priority level: hourglass.Priority.
type Priority = hourglass.Priority

// The levels, as hourglass names them.
const (
	PriorityNormal = hourglass.PriorityNormal
	PriorityHigh   = hourglass.PriorityHigh
	PriorityLow    = hourglass.PriorityLow
)

// priorityShift is where the level starts in the task data's max_retries
// field: 16384 * level + max retries (lib.lua's prio_split;
// docs/protocol.md, "Task data").
const priorityShift = 16384

// splitRetries splits a task data's max_retries field: max retries, the
// level and the trace flag (traceFlag). A level above PriorityLow
// (corrupt data) reads as PriorityNormal, as lib.lua's prio_split reads
// it.
func splitRetries(field int) (maxRetries int, p Priority, traced bool) {
	p = Priority(field / priorityShift)
	if !p.Valid() {
		p = PriorityNormal
	}
	return field % traceFlag, p, field/traceFlag%2 == 1
}

// retriesField renders t's max_retries field (splitRetries).
func retriesField(t Task) int {
	f := t.MaxRetries + priorityShift*int(t.Priority)
	if t.TraceParent != "" {
		f += traceFlag
	}
	return f
}
