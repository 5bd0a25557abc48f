package shard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hourglass-sched/hourglass/internal/errtext"
)

// Cancel ends a task in any state and returns the state it was in:
// scheduled, ready or dead (deleted), or active (a worker has it: its
// lease or popped entry is revoked, so that nothing the worker reports is
// recorded, its id is published on the cancel channel for that worker to
// cancel its handler's ctx, and it is recorded as cancelled for
// EndedRetention, which Lookup reports). It returns ErrNotFound for an
// unknown id. It visits every home of the id
// (the locator's order: the old home, then the new one), so that a task
// that moves meanwhile does not come back: a copy on its way (an outbox
// entry) is marked cancelled there and its imported copy is removed by
// the reshard's commit.
func (s *Store) Cancel(ctx context.Context, id string) (string, error) {
	state, _, err := s.CancelQueue(ctx, id)
	return state, err
}

// CancelQueue is Cancel that also returns the task's queue ("" for one
// whose data names none, or that was on its way to another shard).
func (s *Store) CancelQueue(ctx context.Context, id string) (state, queue string, err error) {
	if !ValidStoredID(id) {
		return "", "", fmt.Errorf("%w: task id %q", ErrInvalidArgument, id)
	}
	found, err := s.every(ctx, id, func(ctx context.Context, p Place) (bool, error) {
		st, q, err := s.cancelIn(ctx, p, id)
		if errors.Is(err, ErrNotFound) {
			return false, nil
		}
		state, queue = st, q
		return true, err
	})
	if err == nil && !found {
		err = taskNotFound(id)
	}
	return state, queue, err
}

// How long, and how many per queue and shard, the records of tasks
// cancelled while a worker had them are kept (Lookup reports them
// "cancelled") when their queue keeps no records of its ended tasks
// (Retention).
const (
	EndedRetention = 24 * time.Hour
	EndedKeep      = 10000
)

// cancelIn cancels id in one place: a shard, with its outbox for an
// outbox place (Keys.OutboxKeys).
func (s *Store) cancelIn(ctx context.Context, p Place, id string) (state, queue string, err error) {
	sh := p.Shard
	keys := append([]string{s.k.Delayed(sh), s.k.Tasks(sh), s.k.Inflight(sh), s.k.Dead(sh), s.k.DeadInfo(sh), s.k.Errors(sh), s.k.Counts(sh)},
		s.k.OutboxKeys(p)...)
	v, err := cancelScript.Run(ctx, s.rdb, keys, id, s.k.ReadyPrefix(sh), s.k.PendingPrefix(sh),
		"running", s.k.Leases(sh), s.k.Ended(sh), s.k.EndedIndexPrefix(sh), s.k.CancelChannel(),
		EndedRetention.Milliseconds(), EndedKeep, s.k.Queues(sh), s.k.DonePrefix()).Slice()
	if err != nil {
		return "", "", errtext.Errorf("cancel %q: %w", id, err)
	}
	code, _ := v[0].(int64)
	state, _ = v[1].(string)
	if len(v) > 2 {
		queue, _ = v[2].(string)
	}
	switch code {
	case 1:
		return state, queue, nil
	case 0:
		return "", "", taskNotFound(id)
	default:
		return state, "", fmt.Errorf("%w: %q", ErrActive, id)
	}
}
