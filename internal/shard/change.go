package shard

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hourglass-sched/hourglass/internal/errtext"
)

// DueRule says how a Change's new due time applies to the task's.
type DueRule string

// The due rules of change.lua.
const (
	// DueSet replaces the due time (the zero DueRule is DueSet).
	DueSet DueRule = "set"
	// DueEarliest keeps the earlier of the two due times.
	DueEarliest DueRule = "min"
	// DueLatest keeps the later of the two due times.
	DueLatest DueRule = "max"
)

// Change is a change to a pending task (Store.Change): its due time, its
// payload, its priority, or any of them.
type Change struct {
	// SetDue changes the due time: to Due when it is not zero, else to
	// Delay (0 or more) after Redis server time, as Rule says.
	SetDue bool
	Due    time.Time
	Delay  time.Duration
	// Rule is how the new due time applies; "" is DueSet.
	Rule DueRule
	// Payload replaces the payload when it is not nil (an empty, non-nil
	// slice empties it).
	Payload []byte
	// SetPriority changes the task's level to Priority. A task of a fair
	// queue waiting for its key's turn moves to the end of the key's
	// tasks of that level (docs/fairness.md, "Priorities").
	SetPriority bool
	Priority    Priority
}

// ChangeResult is the outcome of a Change.
type ChangeResult struct {
	// State is where the task was: "scheduled" or "ready".
	State string
	// Due is the task's due time after the change.
	Due time.Time
	// Shard is the shard that holds the task.
	Shard int
}

// args renders c as change.lua's ARGV[5..8], and ARGV[10] when it sets
// the priority.
func (c Change) args() ([]any, error) {
	due := ""
	switch {
	case !c.SetDue:
	case !c.Due.IsZero():
		if ms := c.Due.UnixMilli(); ms < 0 || ms > MaxDue {
			return nil, fmt.Errorf("%w: due time %s", ErrInvalidArgument, c.Due)
		}
		due = strconv.FormatInt(c.Due.UnixMilli(), 10)
	case c.Delay < 0:
		return nil, fmt.Errorf("%w: negative delay %s", ErrInvalidArgument, c.Delay)
	default:
		due = "+" + strconv.FormatInt(c.Delay.Milliseconds(), 10)
	}
	rule := c.Rule
	switch rule {
	case "":
		rule = DueSet
	case DueSet, DueEarliest, DueLatest:
	default:
		return nil, fmt.Errorf("%w: due rule %q", ErrInvalidArgument, c.Rule)
	}
	args := []any{due, string(rule), "", ""}
	if c.Payload != nil {
		args[2], args[3] = "1", c.Payload
	}
	if c.SetPriority {
		if !c.Priority.Valid() {
			return nil, fmt.Errorf("%w: priority %d", ErrInvalidArgument, int(c.Priority))
		}
		args = append(args, "", strconv.Itoa(int(c.Priority))) // ARGV[9] (no latest due), ARGV[10]
	}
	return args, nil
}

// Change applies c to the pending task id, atomically, wherever a change
// of the shard count has it (see locate.go): it keeps the task's id,
// attempts and last error. A task in its ready list that no worker has
// taken yet is taken back when its due time changes (docs/protocol.md,
// "Changing a pending task"). Errors: ErrNotFound, ErrActive (a worker
// has it), ErrDead (a dead letter), ErrPayloadTooLarge,
// ErrInvalidArgument, and ErrInTransit while a change of the shard count
// moves it (try again shortly).
func (s *Store) Change(ctx context.Context, id string, c Change) (ChangeResult, error) {
	if !ValidStoredID(id) {
		return ChangeResult{}, fmt.Errorf("%w: task id %q", ErrInvalidArgument, id)
	}
	args, err := c.args()
	if err != nil {
		return ChangeResult{}, err
	}
	// A task cancelled on its way to its new shard keeps an imported copy
	// there until the reshard removes it, as long as that copy is as
	// imported: changing it would bring the task back.
	if h := s.Layout().Homes(id); h.Moving() {
		gone, err := s.rdb.HExists(ctx, s.k.Cancelled(h.Old), id).Result()
		if err != nil {
			return ChangeResult{}, errtext.Errorf("change %q: %w", id, err)
		}
		if gone {
			return ChangeResult{}, taskNotFound(id)
		}
	}
	var res ChangeResult
	err = s.find(ctx, id, func(ctx context.Context, p Place) (bool, error) {
		if p.Outbox {
			return s.inTransit(ctx, p, id)
		}
		r, err := s.changeIn(ctx, p.Shard, id, args)
		if errors.Is(err, ErrNotFound) {
			return false, nil
		}
		res = r
		return true, err
	})
	return res, err
}

// changeIn runs change.lua for id in shard sh; args are Change.args.
func (s *Store) changeIn(ctx context.Context, sh int, id string, args []any) (ChangeResult, error) {
	keys := []string{s.k.Delayed(sh), s.k.Tasks(sh), s.k.Inflight(sh), s.k.Dead(sh), s.k.Queues(sh), s.k.Counts(sh)}
	argv := append([]any{id, s.k.ReadyPrefix(sh), s.k.PendingPrefix(sh), s.k.WakeChannel(sh)}, args...)
	v, err := changeScript.Run(ctx, s.rdb, keys, argv...).Slice()
	if err != nil {
		return ChangeResult{}, errtext.Errorf("change %q: %w", id, err)
	}
	if len(v) != 3 {
		return ChangeResult{}, errtext.Errorf("change %q: unexpected reply %v", id, v)
	}
	code, _ := v[0].(int64)
	detail, _ := v[1].(string)
	due, _ := v[2].(int64)
	switch code {
	case 1:
		return ChangeResult{State: detail, Due: time.UnixMilli(due), Shard: sh}, s.replicated(ctx, fmt.Sprintf("change of %q", id))
	case 0:
		return ChangeResult{}, taskNotFound(id)
	case -1:
		return ChangeResult{}, fmt.Errorf("%w: %q: a worker has it", ErrActive, id)
	case -2:
		return ChangeResult{}, fmt.Errorf("%w: %q", ErrDead, id)
	case -4:
		return ChangeResult{}, fmt.Errorf("%w: %q: the queue allows %s bytes", ErrPayloadTooLarge, id, detail)
	default:
		return ChangeResult{}, fmt.Errorf("%w: change %q: %s", ErrInvalidArgument, id, detail)
	}
}
