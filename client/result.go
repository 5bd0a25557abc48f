package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/hourglass-sched/hourglass"
	"github.com/hourglass-sched/hourglass/internal/shard"
)

// Result returns task id once it has ended: succeeded (with what its
// handler returned in TaskInfo.Result), cancelled or dead. A task that
// has not ended yet returns ErrNotFinished with its current view. Records
// of succeeded and cancelled tasks are kept for their queue's retention
// (queues.<q>.retention; 0 keeps none, and such a task is then simply
// not found once it succeeded): ErrNotFound after that. One lookup.
func (c *Client) Result(ctx context.Context, id string) (hourglass.TaskInfo, error) {
	t, err := c.Lookup(ctx, id)
	if err == nil && !t.State.Final() {
		err = fmt.Errorf("%w: %q is %s", ErrNotFinished, truncate(id), t.State)
	}
	return t, err
}

// Wait blocks until task id has ended and returns it as Result does:
// succeeded, cancelled or dead. It is woken by the notice the task's end
// publishes on the task's own channel, not by polling: the Waits of one
// Client share one pub/sub connection, open while some Wait runs. Each
// confirmation of that subscription (a reconnection's too, after which
// a notice may have been missed) makes it look again. The task's queue
// must keep records of its ended tasks (queues.<q>.retention), or a
// success could not be told from an absence: ErrNotKept otherwise.
// ErrNotFound for an id that is not stored (or whose record is gone);
// ctx's error when it ends first.
func (c *Client) Wait(ctx context.Context, id string) (hourglass.TaskInfo, error) {
	if !shard.ValidStoredID(id) {
		return hourglass.TaskInfo{}, fmt.Errorf("%w: task id %q", ErrInvalidArgument, truncate(id))
	}
	notices, stop := c.hub.Signal(ctx, c.store.Keys().Done(id), nil)
	defer stop()
	kept := false
	for {
		// The first signal is the subscription's confirmation (or a
		// notice, which comes through it): a lookup after it cannot miss
		// the task's end.
		select {
		case <-ctx.Done():
			return hourglass.TaskInfo{}, ctx.Err()
		case <-notices:
		}
		t, err := c.Result(ctx, id)
		if !errors.Is(err, ErrNotFinished) {
			return t, err
		}
		if !kept {
			r, err := c.store.Retentions(ctx, []string{t.Queue})
			if err != nil {
				return t, err
			}
			if r[t.Queue].Age == 0 {
				return t, fmt.Errorf("%w: queue %q (set queues.%s.retention)", ErrNotKept, t.Queue, t.Queue)
			}
			kept = true
		}
	}
}
