package shard

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/hourglass-sched/hourglass/internal/errtext"
)

// DebounceMode is how debounce.lua treats the calls of one key.
type DebounceMode string

// The modes of debounce.lua (docs/protocol.md, "Debounce and throttle").
const (
	// DebounceTrailing: every call replaces the window's task's payload
	// and moves it to now + Delay, never past the first call + MaxWait.
	DebounceTrailing DebounceMode = "trailing"
	// DebounceLeading: the first call runs at once; the calls within the
	// window (Delay after the last one, at most MaxWait after the first)
	// are dropped.
	DebounceLeading DebounceMode = "leading"
	// DebounceLeadingTrailing: as DebounceLeading, and the dropped calls
	// are kept as one task at the window's end, with the last payload.
	DebounceLeadingTrailing DebounceMode = "leading+trailing"
	// Throttle: the first call runs at once; the calls within the next
	// Delay are dropped.
	Throttle DebounceMode = "throttle"
)

// DebounceArgs are the arguments of one debounced (or throttled) call.
type DebounceArgs struct {
	// Key is the caller's key (its rules are a task id's, ValidID): the
	// calls of one key share windows.
	Key     string
	Mode    DebounceMode
	Delay   time.Duration // at least 1 ms
	MaxWait time.Duration // 0: none
	// The task a call creates: as EnqueueArgs's.
	Queue      string
	Payload    []byte
	MaxRetries int
	Timeout    time.Duration
	// Priority is the level of the task a window creates; a call that
	// changes the window's task leaves its level.
	Priority Priority
}

// DebounceOutcome says what a debounced call did.
type DebounceOutcome int

const (
	// DebounceCreated: the call created a task (a window opened, or the
	// first kept call of a leading+trailing window).
	DebounceCreated DebounceOutcome = 1
	// DebounceChanged: the window's task took the call's payload (and,
	// trailing, its new due time).
	DebounceChanged DebounceOutcome = 2
	// DebounceDropped: the call fell within a window and runs nothing.
	DebounceDropped DebounceOutcome = 3
)

// DebounceResult is the outcome of one debounced call.
type DebounceResult struct {
	Outcome DebounceOutcome
	// ID is the task created or changed, or the window's task for a
	// dropped call ("" when it has none).
	ID string
	// Due is that task's due time, or the window's end for a dropped call.
	Due time.Time
	// Turn is the call's place among its window's calls (1: the first).
	Turn int
}

// Debounce runs one call of key a.Key through debounce.lua, in the key's
// shard (ShardOf(a.Key)); a task it creates gets a fresh id of that shard.
// Errors wrap ErrUnknownQueue, ErrPayloadTooLarge or ErrInvalidArgument,
// or are Redis's (TRYAGAIN during a slot migration: nothing written).
func (s *Store) Debounce(ctx context.Context, a DebounceArgs) (DebounceResult, error) {
	switch {
	case !ValidID(a.Key):
		return DebounceResult{}, fmt.Errorf("%w: debounce key %q must be %s", ErrInvalidArgument, a.Key, IDRule)
	case a.Delay < time.Millisecond:
		return DebounceResult{}, fmt.Errorf("%w: debounce delay %s (at least 1ms)", ErrInvalidArgument, a.Delay)
	case a.MaxWait < 0:
		return DebounceResult{}, fmt.Errorf("%w: debounce max wait %s", ErrInvalidArgument, a.MaxWait)
	}
	for attempt := 0; ; attempt++ {
		l := s.Layout()
		sh := l.ShardOf(a.Key)
		task := enqueueArgs(EnqueueArgs{ID: freshID(l, sh), Queue: a.Queue, Payload: a.Payload, MaxRetries: a.MaxRetries, Timeout: a.Timeout, Priority: a.Priority})
		args := []any{string(a.Mode), a.Delay.Milliseconds(), a.MaxWait.Milliseconds(), "@" + strconv.FormatInt(l.Gen(), 10),
			l.WakeChannel(sh), task[0], task[2], task[3], task[4], task[5], l.ReadyPrefix(sh), l.PendingPrefix(sh)}
		keys := []string{l.Delayed(sh), l.Tasks(sh), l.Queues(sh), l.Far(sh), l.Counts(sh), l.Marker(sh), l.Window(sh, a.Key), l.Inflight(sh), l.Dead(sh)}
		v, err := debounceScript.Run(ctx, s.rdb, keys, args...).Slice()
		if nl, ok := s.layoutFromError(err); ok && attempt < maxRedirects {
			s.SetLayout(nl)
			continue
		}
		if err != nil {
			return DebounceResult{}, errtext.Errorf("debounce %q: %w", a.Key, err)
		}
		if len(v) != 4 {
			return DebounceResult{}, errtext.Errorf("debounce %q: unexpected reply %v", a.Key, v)
		}
		code, _ := v[0].(int64)
		detail, _ := v[1].(string)
		due, _ := v[2].(int64)
		turn, _ := v[3].(int64)
		switch code {
		case 1, 2, 3:
			r := DebounceResult{Outcome: DebounceOutcome(code), ID: detail, Due: time.UnixMilli(due), Turn: int(turn)}
			if code == 3 {
				return r, nil
			}
			return r, s.replicated(ctx, fmt.Sprintf("debounced task %q", detail))
		case 0:
			if attempt < maxRedirects {
				continue // the fresh id was taken: another one
			}
			return DebounceResult{}, errtext.Errorf("debounce %q: no fresh task id", a.Key)
		case -1:
			return DebounceResult{}, fmt.Errorf("%w: %q", ErrUnknownQueue, detail)
		case -2:
			return DebounceResult{}, fmt.Errorf("%w: the queue allows %s bytes", ErrPayloadTooLarge, detail)
		default:
			return DebounceResult{}, fmt.Errorf("%w: debounce %q: %s", ErrInvalidArgument, a.Key, detail)
		}
	}
}
