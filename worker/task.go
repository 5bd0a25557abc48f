package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hourglass-sched/hourglass"
)

// Errors reported by the worker. ErrStaleToken and ErrInvalidConfig are
// package hourglass's values, shared with client and inspect.
var (
	// ErrLeaseLost is the cause of a handler ctx's cancellation when the
	// delivery's lease could not be kept.
	ErrLeaseLost = errors.New("hourglass: lease lost")
	// ErrCancelled is the cause of a handler ctx's cancellation when the
	// task was cancelled (client.Cancel, hourglass task cancel) while it
	// ran: nothing the handler returns is recorded.
	ErrCancelled = hourglass.ErrCancelled
	// ErrStaleToken is returned by a manual Ack or Nack whose delivery is
	// no longer current.
	ErrStaleToken = hourglass.ErrStaleToken
	// ErrInvalidConfig wraps every error of Config.Validate,
	// QueueOptions.Validate, New, Handle and a Run that cannot start.
	// Such an error also matches hourglass.ErrInvalidArgument; it is
	// client.ErrInvalidConfig too.
	ErrInvalidConfig = hourglass.ErrInvalidConfig
	// ErrShuttingDown is the cause of a handler ctx's cancellation when
	// the shutdown grace period ran out; the task is released.
	ErrShuttingDown = errors.New("hourglass: worker shutting down")
	// ErrResultTooLarge is returned by Task.SetResult for a result over
	// MaxResult bytes.
	ErrResultTooLarge = errors.New("hourglass: result too large")
	// ErrNotKept is returned by Task.SetResult when the task's queue keeps
	// no records of its ended tasks (queues.<q>.retention is 0): the
	// result would be dropped.
	ErrNotKept = hourglass.ErrNotKept
	// ErrAlreadySettled is returned by Task.Ack or Task.Nack when the
	// delivery was settled otherwise before (released at shutdown, or
	// failed after a lost lease or a handler timeout).
	ErrAlreadySettled = errors.New("hourglass: delivery already settled")
)

// Handler runs one task. See the package documentation for how its
// result is used.
type Handler func(ctx context.Context, t *Task) error

// Task is one delivery of a task to a handler.
type Task struct {
	ID    string
	Queue string
	// Payload is the task's payload, unchanged.
	Payload []byte
	// Attempt is 1 for the first delivery, 2 for the first retry, ...
	Attempt    int
	MaxRetries int
	// Priority is the task's level (hourglass.Priority).
	Priority hourglass.Priority
	// Due is when the task was due (Redis time); Enqueued when stored.
	Due, Enqueued time.Time

	d *delivery // the worker's side of the delivery
}

// Ack completes a manual-ack delivery. It returns ErrStaleToken if the
// lease was lost meanwhile.
func (t *Task) Ack(ctx context.Context) error { return t.d.finish(ctx, nil) }

// Nack fails a manual-ack delivery with err (NoRetry and RetryAfter
// apply).
func (t *Task) Nack(ctx context.Context, err error) error {
	if err == nil {
		err = errors.New("nack without error")
	}
	return t.d.finish(ctx, err)
}

// MaxResult is the largest result a handler may set (Task.SetResult).
const MaxResult = 64 << 10

// SetResult sets what the task's record keeps as its result once the
// handler succeeded (client.Result and client.Wait return it): at most
// MaxResult bytes (ErrResultTooLarge), in a queue that keeps records of
// its ended tasks (ErrNotKept otherwise: see queues.<q>.retention). A
// later call replaces the result; a failed attempt drops it. Call it
// before the handler returns (or before a manual Ack).
func (t *Task) SetResult(b []byte) error {
	switch {
	case len(b) > MaxResult:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrResultTooLarge, len(b), MaxResult)
	case !t.KeepsResult():
		return fmt.Errorf("%w: queue %q", ErrNotKept, t.Queue)
	}
	b = slices.Clone(b)
	t.d.output.Store(&b)
	return nil
}

// KeepsResult reports whether the task's queue keeps records of its ended
// tasks, so that SetResult keeps a result: a handler whose result costs
// something to build may skip it otherwise.
func (t *Task) KeepsResult() bool { return t.d != nil && t.d.q.keeps.Load() }

// noRetryError marks an error that must not be retried.
type noRetryError struct{ err error }

func (e noRetryError) Error() string { return "not retryable: " + e.err.Error() }
func (e noRetryError) Unwrap() error { return e.err }

// NoRetry wraps err so that the task goes to the dead-letter queue
// without further attempts.
func NoRetry(err error) error {
	if err == nil {
		err = errors.New("no retry requested")
	}
	return noRetryError{err}
}

// retryAfterError asks for a retry after a given delay.
type retryAfterError struct {
	d   time.Duration
	err error
}

func (e retryAfterError) Error() string {
	return fmt.Sprintf("retry after %s: %v", e.d, e.err)
}
func (e retryAfterError) Unwrap() error { return e.err }

// RetryAfter wraps err so that the task is retried after d instead of the
// backoff delay (still counting an attempt against its max retries).
func RetryAfter(d time.Duration, err error) error {
	if err == nil {
		err = errors.New("retry requested")
	}
	return retryAfterError{d: d, err: err}
}
