// Package hourglass holds what Hourglass's public packages share: the
// sentinel errors that client, worker, inspect and periodic return, the
// one view of a stored task (TaskInfo, with its State and DeadInfo) that
// client.Lookup and inspect report, and Retries for the retry limits
// whose nil means the default. Each of those packages re-exports what it
// uses under the same names (client.ErrNotFound, inspect.ErrNotFound and
// hourglass.ErrNotFound are one value; inspect.Task is TaskInfo), so
// errors.Is matches an error whichever package's name a caller tests it
// with, and a task read by one package is the same value read by another.
// Every error those packages (and coord and codec) return starts with
// "hourglass: ", once: "hourglass: invalid argument: task id ...", never
// "client: hourglass: ...".
//
// The client, worker, inspect and periodic packages are Hourglass's Go
// API; this one only names what they have in common.
package hourglass

import "errors"

// Sentinel errors, tested with errors.Is. The Redis scripts' result
// codes map to them (docs/protocol.md), so an error reported by Redis is
// the same value whichever package returned it.
var (
	// ErrDuplicate reports an enqueue of an id that is still live
	// (scheduled, ready, running or dead). Nothing was changed.
	ErrDuplicate = errors.New("hourglass: task id already exists")
	// ErrUnknownQueue reports an enqueue to a queue that no scheduler
	// has registered (or that was removed).
	ErrUnknownQueue = errors.New("hourglass: unknown queue")
	// ErrPayloadTooLarge reports a payload above the configured maximum.
	ErrPayloadTooLarge = errors.New("hourglass: payload too large")
	// ErrInvalidArgument reports a malformed id, queue name, time, option,
	// cursor, filter or schedule. ErrInvalidConfig is one.
	ErrInvalidArgument = errors.New("hourglass: invalid argument")
	// ErrInvalidConfig reports a Config a constructor (New)
	// cannot use; it also matches ErrInvalidArgument.
	ErrInvalidConfig error = &kindError{msg: "hourglass: invalid config", parent: ErrInvalidArgument}
	// ErrNotFound reports a task, dead letter, queue or schedule that is
	// not stored (or not registered).
	ErrNotFound = errors.New("hourglass: not found")
	// ErrActive reports a cancel or a change of a task that is running:
	// leased, or popped by a worker (which runs popped tasks before
	// leasing them).
	ErrActive = errors.New("hourglass: task is running")
	// ErrCancelled is the cause of a running handler's ctx when its task
	// was cancelled from anywhere (client.Cancel): the task has ended, and
	// nothing the handler reports changes it.
	ErrCancelled = errors.New("hourglass: task cancelled")
	// ErrNotFinished is returned by client.Result for a task that has
	// not ended yet.
	ErrNotFinished = errors.New("hourglass: task not finished")
	// ErrNotKept is returned by client.Wait for a task whose queue keeps
	// no records of its ended tasks (queues.<q>.retention is 0): its
	// success could not be told from its absence.
	ErrNotKept = errors.New("hourglass: the queue keeps no records of ended tasks")
	// ErrDead reports a change (reschedule, replace) of a task that is in
	// the dead-letter queue; replaying it runs it again.
	ErrDead = errors.New("hourglass: task is dead-lettered")
	// ErrStaleToken reports an ack, nack, extend or release whose
	// delivery token is no longer the task's: its lease expired and the
	// task was rescheduled or delivered again.
	ErrStaleToken = errors.New("hourglass: stale delivery token")
	// ErrNotReplicated reports an enqueue that Redis stored but whose
	// copy did not reach the replicas asked for in time: a failover now
	// may lose it. Sending it again with the same id is safe
	// (ErrDuplicate then says it is stored).
	ErrNotReplicated = errors.New("hourglass: stored, not yet replicated")
)

// kindError is a sentinel that is a kind of another: errors.Is matches
// both.
type kindError struct {
	msg    string
	parent error
}

func (e *kindError) Error() string { return e.msg }

// Unwrap returns the sentinel e is a kind of.
func (e *kindError) Unwrap() error { return e.parent }
