package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hourglass-sched/hourglass/internal/shard"
)

// Conflict is what an enqueue does when a task with the same ID is live
// (Task.OnConflict).
type Conflict int

const (
	// ConflictIgnore leaves the live task as it is and reports
	// ErrDuplicate: the default.
	ConflictIgnore Conflict = iota
	// ConflictReplace gives the live task, if it is still pending
	// (scheduled, or ready and not taken by a worker), this task's payload
	// and due time.
	ConflictReplace
	// ConflictKeepEarliest keeps the live task's payload and runs it at
	// the earlier of the two due times.
	ConflictKeepEarliest
	// ConflictKeepLatest keeps the live task's payload and runs it at the
	// later of the two due times.
	ConflictKeepLatest
)

// String names the rule as the CLI and the docs do.
func (c Conflict) String() string {
	switch c {
	case ConflictIgnore:
		return "ignore"
	case ConflictReplace:
		return "replace"
	case ConflictKeepEarliest:
		return "keep-earliest"
	case ConflictKeepLatest:
		return "keep-latest"
	}
	return fmt.Sprintf("Conflict(%d)", int(c))
}

// Reschedule moves the pending task id to at (millisecond precision),
// earlier or later, keeping its id, payload, attempts and last error. A
// task in its ready list that no worker has taken yet is taken back and
// waits for at. It returns the task's new due time, and ErrNotFound,
// ErrActive (a worker has it: it runs or is about to), ErrDead (a dead
// letter: replay it) or ErrInvalidArgument.
//
// The change is atomic in Redis: the task runs at the new time, or, if a
// worker took it first, the call reports ErrActive and nothing changed.
// While a change of the shard count moves the task, or Redis refuses the
// call before running it, the client tries again for Config.RetryFor.
// Any other error (a connection lost) leaves the outcome unknown: the
// task may have changed; Lookup says.
func (c *Client) Reschedule(ctx context.Context, id string, at time.Time) (time.Time, error) {
	if at.IsZero() {
		return time.Time{}, fmt.Errorf("%w: reschedule %q to the zero time", ErrInvalidArgument, truncate(id))
	}
	r, err := c.change(ctx, id, shard.Change{SetDue: true, Due: at})
	return r.Due, err
}

// Replace gives the pending task id a new payload, keeping its id, due
// time, attempts and last error (and, for a ready task, its place in its
// ready list). Errors as for Reschedule, and ErrPayloadTooLarge.
func (c *Client) Replace(ctx context.Context, id string, payload []byte) error {
	if payload == nil {
		payload = []byte{}
	}
	if int64(len(payload)) > c.maxPayload {
		return fmt.Errorf("%w: %d bytes > %d", ErrPayloadTooLarge, len(payload), c.maxPayload)
	}
	_, err := c.change(ctx, id, shard.Change{Payload: payload})
	return err
}

// SetPriority changes the level of the pending task id, keeping
// everything else. A task of a fair queue still waiting for its key's
// turn moves to the end of the key's tasks of level p; a scheduled task
// waits with its new level; a task already in its queue's window keeps
// its place (the level applies to its retries). Errors as for
// Reschedule.
func (c *Client) SetPriority(ctx context.Context, id string, p Priority) error {
	if !p.Valid() {
		return fmt.Errorf("%w: priority %d", ErrInvalidArgument, int(p))
	}
	_, err := c.change(ctx, id, shard.Change{SetPriority: true, Priority: p})
	return err
}

// change applies ch to id, trying again, for c.retryFor, the calls that
// did nothing (notRun: an id on its way to its new shard, a slot
// migrating). A call whose connection failed is not sent again: it may
// have changed the task, and a second change could find it taken.
func (c *Client) change(ctx context.Context, id string, ch shard.Change) (r shard.ChangeResult, err error) {
	if !shard.ValidStoredID(id) {
		return shard.ChangeResult{}, fmt.Errorf("%w: task id %q", ErrInvalidArgument, truncate(id))
	}
	c.layout.Layout(ctx)
	err = c.retryNotRun(ctx, func() error {
		r, err = c.store.Change(ctx, id, ch)
		return err
	})
	return r, err
}

// conflictChange is the change a duplicate of t makes under its
// OnConflict rule (ok false: none).
func conflictChange(t Task) (shard.Change, bool) {
	ch := shard.Change{SetDue: true, Due: t.At, Delay: t.Delay}
	switch t.OnConflict {
	case ConflictReplace:
		ch.Payload = t.Payload
		if ch.Payload == nil {
			ch.Payload = []byte{}
		}
	case ConflictKeepEarliest:
		ch.Rule = shard.DueEarliest
	case ConflictKeepLatest:
		ch.Rule = shard.DueLatest
	default:
		return ch, false
	}
	return ch, true
}

// maxConflictRounds bounds how often an enqueue with a conflict rule
// alternates between changing the live task and enqueueing anew, when
// the live task keeps finishing (or appearing) in between.
const maxConflictRounds = 5

// resolveConflicts applies each task's OnConflict rule to the duplicates
// of out: the live task is changed (Result.Changed), or, when it finished
// meanwhile, the task is enqueued again. A live task that cannot change
// (a worker has it, or it is dead) leaves ErrDuplicate, wrapped with why.
// A task enqueued again carries traceParent, as the first try did.
func (c *Client) resolveConflicts(ctx context.Context, tasks []Task, out []Result, traceParent string) {
	for i, t := range tasks {
		ch, ok := conflictChange(t)
		if !ok || !errors.Is(out[i].Err, ErrDuplicate) || errors.Is(out[i].Err, ErrNotReplicated) {
			continue
		}
		for round := 0; round < maxConflictRounds; round++ {
			r, err := c.change(ctx, out[i].ID, ch)
			if err == nil || errors.Is(err, ErrNotReplicated) {
				out[i] = Result{ID: out[i].ID, Due: r.Due, Changed: true, Err: err}
				break
			}
			if !errors.Is(err, ErrNotFound) {
				out[i].Err = fmt.Errorf("%w: %w", ErrDuplicate, err)
				break
			}
			// The live task finished in between: enqueue this one.
			again := t
			again.ID, again.Key = out[i].ID, "" // the id carries the key already
			a, err := c.toArgs(again)
			if err != nil {
				out[i].Err = err
				break
			}
			a.TraceParent = traceParent
			r2 := c.enqueueRetrying(ctx, []shard.EnqueueArgs{a}, []bool{false})[0]
			out[i] = Result{ID: a.ID, Due: r2.Due, Err: r2.Err}
			if !errors.Is(r2.Err, ErrDuplicate) || r2.State == "reserved" {
				break
			}
		}
	}
}
