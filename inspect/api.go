package inspect

import (
	"context"
	"errors"
	"time"
)

// errTODO marks methods still being written.
var errTODO = errors.New("inspect: not implemented yet")

// Queues returns every registered queue, by name, with its counts, and
// the totals over all of them. One bounded script call per shard.
func (i *Inspector) Queues(ctx context.Context) ([]Queue, Counts, error) {
	return nil, Counts{}, errTODO
}

// Queue returns one queue with its per-shard counts (Queue.Shards).
// ErrNotFound when no shard has it registered.
func (i *Inspector) Queue(ctx context.Context, name string) (Queue, error) {
	return Queue{}, errTODO
}

// SetQueue registers queue name with policy p in every shard, or changes
// its policy; it takes effect at once for new enqueues and retries, with
// no scheduler restart. A removed queue that is still draining becomes
// active again.
func (i *Inspector) SetQueue(ctx context.Context, name string, p Policy) error {
	return errTODO
}

// RemoveQueue marks queue name removed: enqueues to it are refused from
// now on, its stored tasks (scheduled, ready, running, dead) drain as
// usual, and each shard's owner deletes the registration once the
// queue's tasks in that shard are gone. ErrNotFound if not registered.
func (i *Inspector) RemoveQueue(ctx context.Context, name string) error {
	return errTODO
}

// Pause pauses queue name cluster-wide: workers start no new task of it
// (within a second; tasks already running finish), while enqueues and
// moves to ready lists go on. Idempotent.
func (i *Inspector) Pause(ctx context.Context, name string) error {
	return errTODO
}

// Resume resumes a paused queue; workers are told at once (an event, not
// a poll) and deliver everything that waited. Idempotent.
func (i *Inspector) Resume(ctx context.Context, name string) error {
	return errTODO
}

// ListOptions select a page of tasks.
type ListOptions struct {
	// Queue restricts the listing to one queue ("" all; required for
	// StateReady).
	Queue string
	// State is the state to list (required).
	State State
	// Cursor continues a listing: the Cursor of the previous Page, ""
	// to start.
	Cursor string
	// Limit bounds the entries examined by the call (not only the ones
	// returned: with a Queue filter a page may be short, or empty with a
	// non-empty Cursor). Default 100, at most 1000.
	Limit int
}

// Page is one page of a listing. Cursor is "" when the listing is
// complete. A listing visits every shard in turn; a task that changes
// state while it runs may be listed in neither state or in both, a task
// that stays put is listed exactly once.
type Page struct {
	Tasks  []Task `json:"tasks"`
	Cursor string `json:"cursor"`
}

// ListTasks returns a page of the tasks in opts.State.
func (i *Inspector) ListTasks(ctx context.Context, opts ListOptions) (Page, error) {
	return Page{}, errTODO
}

// Task looks up one task by id, in any state. ErrNotFound if no such
// task is stored.
func (i *Inspector) Task(ctx context.Context, id string) (Task, error) {
	return Task{}, errTODO
}

// Cancel deletes a task that is not running, whatever its state
// (scheduled, ready or dead), and returns the state it was in. Its id can
// be enqueued again afterwards. ErrNotFound if no such task,
// ErrTaskActive if it is running.
func (i *Inspector) Cancel(ctx context.Context, id string) (State, error) {
	return "", errTODO
}

// DeadFilter selects dead letters. Zero fields match everything.
type DeadFilter struct {
	Queue string `json:"queue,omitempty"`
	// Reason matches the dead-letter reason exactly (for example "max
	// retries exhausted", "lease expired", "not retryable").
	Reason string `json:"reason,omitempty"`
	// ErrorContains matches a substring of the last error.
	ErrorContains string `json:"error_contains,omitempty"`
	// Since and Until bound the time the task was dead-lettered (Since
	// inclusive, Until exclusive).
	Since time.Time `json:"since,omitzero"`
	Until time.Time `json:"until,omitzero"`
}

// ListDead returns a page of dead letters matching f, oldest first in
// each shard. limit bounds the entries examined (default 100, at most
// 1000).
func (i *Inspector) ListDead(ctx context.Context, f DeadFilter, cursor string, limit int) (Page, error) {
	return Page{}, errTODO
}

// Replay moves dead task id back to the scheduled set, due at at (zero:
// now). Its attempts restart from zero and its dead-letter record and last
// error are dropped: it gets the full retry budget again. ErrNotFound if
// id is not dead.
func (i *Inspector) Replay(ctx context.Context, id string, at time.Time) error {
	return errTODO
}

// ReplayDead replays every dead letter matching f (all of them for the
// zero filter) as Replay does, in bounded calls, reporting progress after
// each. It returns the final progress; Done counts the replayed tasks.
func (i *Inspector) ReplayDead(ctx context.Context, f DeadFilter, at time.Time, progress ProgressFunc) (Progress, error) {
	return Progress{}, errTODO
}

// Purge deletes dead task id with its data, so that the id can be
// enqueued again. ErrNotFound if id is not dead.
func (i *Inspector) Purge(ctx context.Context, id string) error {
	return errTODO
}

// PurgeDead purges every dead letter matching f (all of them for the
// zero filter), in bounded calls, reporting progress after each.
func (i *Inspector) PurgeDead(ctx context.Context, f DeadFilter, progress ProgressFunc) (Progress, error) {
	return Progress{}, errTODO
}

// Shards returns every shard with its counts, and its owner and epoch
// when an etcd client was given (otherwise Owner is "" and Epoch 0).
func (i *Inspector) Shards(ctx context.Context) ([]Shard, error) {
	return nil, errTODO
}
