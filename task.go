package hourglass

import "time"

// State is where a stored task is in its life. client.Lookup,
// inspect.Inspector.Task and the listings report it, and Cancel returns
// the state a task was cancelled from.
type State string

// Task states.
const (
	// StateScheduled: waiting for its due time (a retry waits here too).
	StateScheduled State = "scheduled"
	// StateReady: due, waiting in its queue's ready list for a worker.
	StateReady State = "ready"
	// StateActive: handed to a worker, running, leased or not yet.
	StateActive State = "active"
	// StateDead: in the dead-letter queue.
	StateDead State = "dead"
	// StateCancelled: cancelled while a worker had it (Cancel of an
	// active task; its record is kept for a day, or its queue's
	// retention), or before it ran in a queue that keeps records
	// (queues.<q>.retention). Its data is gone; Ended says when.
	StateCancelled State = "cancelled"
	// StateSucceeded: its handler succeeded, in a queue that keeps
	// records of its ended tasks (queues.<q>.retention); its data is
	// gone, Result holds what the handler returned, Ended says when.
	StateSucceeded State = "succeeded"
)

// Final reports whether s is a state a task does not leave: succeeded,
// cancelled or dead (a dead letter may still be replayed by hand).
func (s State) Final() bool {
	return s == StateSucceeded || s == StateCancelled || s == StateDead
}

// TaskInfo is one stored task as Hourglass reports it: the view
// client.Lookup, inspect.Inspector.Task and the inspect listings return
// (inspect.Task is this type).
type TaskInfo struct {
	// ID is the task's id.
	ID string `json:"id"`
	// Queue is the queue the task was enqueued to.
	Queue string `json:"queue"`
	// State is where the task is.
	State State `json:"state"`
	// Shard is the shard the task was found in (during a change of the
	// shard count, its old or its new home).
	Shard int `json:"shard"`
	// Attempts counts the attempts that failed so far.
	Attempts int `json:"attempts"`
	// MaxRetries is the task's retry limit: the one it was enqueued
	// with, or its queue's default at the time.
	MaxRetries int `json:"max_retries"`
	// Priority is the task's level (PriorityNormal unless it was given
	// one).
	Priority Priority `json:"priority"`
	// Timeout is the handler timeout of one attempt, and its lease.
	Timeout time.Duration `json:"timeout"`
	// Due is the time the task is (or was last) due.
	Due time.Time `json:"due"`
	// Enqueued is when the task was stored.
	Enqueued time.Time `json:"enqueued"`
	// Payload is the task's payload. A listing (inspect's ListTasks,
	// ListDead) returns only its first inspect.PreviewBytes, so that a
	// page stays small whatever the payloads; a lookup returns all of it.
	Payload []byte `json:"payload"`
	// PayloadSize is the length of the whole payload in bytes (so a
	// listed task's Payload is cut when it is shorter); -1 when the data
	// could not be read (Problem says why).
	PayloadSize int64 `json:"payload_size"`
	// LastError is the error of the last failed attempt, if any; for a
	// dead task, the error it was dead-lettered with (Dead.Error).
	LastError string `json:"last_error,omitempty"`
	// LeaseDeadline is when an active task's lease ends; zero while it
	// is not leased (a worker runs a task it popped before taking a
	// lease: see worker.QueueOptions.LeaseAfter).
	LeaseDeadline time.Time `json:"lease_deadline,omitzero"`
	// Dead is set for a dead-lettered task.
	Dead *DeadInfo `json:"dead,omitempty"`
	// Ended is when a succeeded or cancelled task ended (StateSucceeded,
	// StateCancelled: read from its record, which has no other data
	// than the queue).
	Ended time.Time `json:"ended,omitzero"`
	// Result is what the handler of a succeeded task returned
	// (worker.Task.SetResult; an HTTP target's answer body).
	Result []byte `json:"result,omitempty"`
	// TraceID is the W3C trace id (32 hex digits) of the trace the task
	// was enqueued in, for a task enqueued with tracing on
	// (docs/tracing.md); empty otherwise.
	TraceID string `json:"trace_id,omitempty"`
	// Problem explains task data that could not be decoded (the data
	// fields are then empty), or a corrupt due time (a delayed-set score
	// that is no time: the shard's owner dead-letters such a task). It
	// is empty for a sound task.
	Problem string `json:"problem,omitempty"`
}

// DeadInfo is why and when a task was dead-lettered.
type DeadInfo struct {
	// Reason is why: "max retries exhausted", "not retryable", "lease
	// expired", "corrupt due time" and the like.
	Reason string `json:"reason"`
	// Error is the error of the attempt that buried the task, if any.
	Error string `json:"error"`
	// At is when the task was dead-lettered.
	At time.Time `json:"at"`
}

// Retries returns a pointer to n: for the retry limits where nil means
// the default and 0 means never retry (client.Task.MaxRetries,
// periodic.Schedule.MaxRetries, inspect.Policy.MaxRetries).
func Retries(n int) *int { return &n }
