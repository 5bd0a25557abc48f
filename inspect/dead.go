package inspect

import (
	"context"
	"errors"
	"time"

	"github.com/hourglass-sched/hourglass/internal/shard"
)

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

// deadBatch is how many dead letters one replay or purge call examines:
// a call then runs for a few milliseconds at most.
const deadBatch = 500

// ListDead returns a page of dead letters matching f, newest first
// across every shard (by the time each was dead-lettered, then by id).
// limit bounds the entries returned and those examined in each shard per
// call (default 100, at most 1000); cursor is "" to start. A page may be
// short while more follow: keep paging until the Cursor is "".
// (ListTasks with StateDead lists them oldest first in each shard.)
func (i *Inspector) ListDead(ctx context.Context, f DeadFilter, cur string, limit int) (Page, error) {
	c := cursor{State: StateDead, Dead: &f, Newest: true}
	if cur != "" {
		var err error
		if c, err = decodeCursor(cur); err != nil {
			return Page{}, err
		}
		if c.State != StateDead || c.Dead == nil || !c.Newest || !sameFilter(*c.Dead, f) {
			return Page{}, errorf(ErrInvalidArgument, "the cursor belongs to another listing")
		}
	}
	if limit <= 0 {
		limit = DefaultLimit
	}
	return i.deadNewest(ctx, c, min(limit, MaxLimit))
}

func sameFilter(a, b DeadFilter) bool {
	return a.Queue == b.Queue && a.Reason == b.Reason && a.ErrorContains == b.ErrorContains &&
		a.Since.Equal(b.Since) && a.Until.Equal(b.Until)
}

// Dead returns dead letter id (Task with Dead set). ErrNotFound if id is
// not a dead letter.
func (i *Inspector) Dead(ctx context.Context, id string) (Task, error) {
	t, err := i.Task(ctx, id)
	if err != nil {
		return Task{}, err
	}
	if t.State != StateDead {
		return Task{}, errorf(ErrNotFound, "task %q is %s, not dead", id, t.State)
	}
	return t, nil
}

// Replay moves dead task id back to the scheduled set, due at at (zero:
// now). Its attempts restart from zero and its dead-letter record and last
// error are dropped: it gets the full retry budget again. ErrNotFound if
// id is not dead; ErrInvalidArgument if its data cannot be decoded (purge
// it instead).
func (i *Inspector) Replay(ctx context.Context, id string, at time.Time) error {
	return deadErr(i.store.DeadOne(ctx, shard.Replay, id, at), id)
}

// Purge deletes dead task id with its data, so that the id can be
// enqueued again. ErrNotFound if id is not dead.
func (i *Inspector) Purge(ctx context.Context, id string) error {
	return deadErr(i.store.DeadOne(ctx, shard.Purge, id, time.Time{}), id)
}

// deadErr maps the error of an operation on dead letter id: the store's
// ErrNotFound is the client's "task not found", while the id may be
// stored in another state.
func deadErr(err error, id string) error {
	if errors.Is(err, shard.ErrNotFound) {
		return errorf(ErrNotFound, "no dead letter %q", id)
	}
	return mapErr(err)
}

// ReplayDead replays every dead letter matching f (all of them for the
// zero filter) as Replay does, in bounded calls (each examines at most
// 500 dead letters of one shard), calling progress (may be nil) after
// each. It returns the final progress: Done counts the replayed tasks.
// Dead letters whose data cannot be decoded are left in place. The
// shards visited are those of the layout record, read again before each
// shard (Progress.Shards follows it): while the shard count changes, a
// dead letter that moves between two shards during the call may be
// missed (run it again once the change ended).
func (i *Inspector) ReplayDead(ctx context.Context, f DeadFilter, at time.Time, progress ProgressFunc) (Progress, error) {
	return i.bulk(ctx, shard.Replay, f, at, progress)
}

// PurgeDead purges every dead letter matching f (all of them for the
// zero filter), in bounded calls, calling progress (may be nil) after
// each. Done counts the purged tasks.
func (i *Inspector) PurgeDead(ctx context.Context, f DeadFilter, progress ProgressFunc) (Progress, error) {
	return i.bulk(ctx, shard.Purge, f, time.Time{}, progress)
}

func (i *Inspector) bulk(ctx context.Context, op shard.DeadOp, f DeadFilter, at time.Time, progress ProgressFunc) (Progress, error) {
	sf := cursor{Dead: &f}.filter()
	var p Progress
	for sh := 0; ; sh++ {
		l, err := i.layout(ctx)
		if err != nil {
			return p, err
		}
		if p.Shards = l.Existing(); sh >= p.Shards {
			return p, nil
		}
		var cur shard.Cursor
		for done := false; !done; {
			r, err := i.store.DeadPage(ctx, sh, op, at, cur, deadBatch, sf)
			if err != nil {
				return p, mapErr(err)
			}
			cur, done = r.Next, r.Done
			p.Calls++
			p.Scanned += r.Examined
			p.Done += r.Acted
			if done {
				p.ShardsDone++
			}
			if progress != nil {
				progress(p)
			}
		}
	}
}
