package shard

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// EnqueueArgs are the arguments of one enqueue. Exactly one of Due and
// Delay decides the due time: a non-zero Due is absolute, otherwise the
// task is due Delay after Redis server time.
type EnqueueArgs struct {
	ID         string
	Queue      string
	Payload    []byte
	Due        time.Time
	Delay      time.Duration
	MaxRetries int           // < 0: the queue's default
	Timeout    time.Duration // 0: the queue's default
}

// EnqueueResult is the outcome of one enqueue.
type EnqueueResult struct {
	// Due is the task's due time; for a duplicate, the due time of the
	// live task if it is still scheduled, else zero.
	Due time.Time
	// State is the live task's state when Err is ErrDuplicate.
	State string
	// Err is nil, or wraps ErrDuplicate, ErrUnknownQueue,
	// ErrPayloadTooLarge, ErrInvalidArgument or a Redis error.
	Err error
}

// enqueueArgs renders one task as the script's six arguments.
func enqueueArgs(a EnqueueArgs) []any {
	due := "+" + strconv.FormatInt(a.Delay.Milliseconds(), 10)
	if !a.Due.IsZero() {
		due = strconv.FormatInt(a.Due.UnixMilli(), 10)
	}
	retries, timeout := "", ""
	if a.MaxRetries >= 0 {
		retries = strconv.Itoa(a.MaxRetries)
	}
	if a.Timeout > 0 {
		timeout = strconv.FormatInt(a.Timeout.Milliseconds(), 10)
	}
	return []any{a.ID, due, a.Queue, retries, timeout, a.Payload}
}

// enqueueChunk bounds the tasks of one script call, so that no call keeps
// Redis busy for long.
const enqueueChunk = 256

// Enqueue stores one task in its shard.
func (s *Store) Enqueue(ctx context.Context, a EnqueueArgs) EnqueueResult {
	return s.EnqueueBatch(ctx, []EnqueueArgs{a})[0]
}

// EnqueueBatch stores many tasks in one pipelined round trip: one script
// call per shard (per enqueueChunk tasks). Each result reports its own
// outcome.
func (s *Store) EnqueueBatch(ctx context.Context, as []EnqueueArgs) []EnqueueResult {
	out := make([]EnqueueResult, len(as))
	byShard := make(map[int][]int)
	for i, a := range as {
		sh := s.l.ShardOf(a.ID)
		byShard[sh] = append(byShard[sh], i)
	}
	var calls []scriptCall
	var members [][]int // task indexes of each call
	for sh, idx := range byShard {
		for len(idx) > 0 {
			n := min(len(idx), enqueueChunk)
			args := make([]any, 1, 1+6*n)
			args[0] = s.l.WakeChannel(sh)
			for _, i := range idx[:n] {
				args = append(args, enqueueArgs(as[i])...)
			}
			calls = append(calls, scriptCall{keys: []string{s.l.Delayed(sh), s.l.Tasks(sh), s.l.Queues(sh), s.l.Far(sh), s.l.Counts(sh)}, args: args})
			members = append(members, idx[:n])
			idx = idx[n:]
		}
	}
	cmds, err := enqueueScript.runPipelined(ctx, s.rdb, calls)
	replicated := true
	if s.wait.Replicas > 0 && err == nil {
		replicated = s.waitReplicas(ctx)
	}
	for c, idx := range members {
		if err != nil {
			for _, i := range idx {
				out[i].Err = err
			}
			continue
		}
		v, cerr := cmds[c].Slice()
		for k, i := range idx {
			switch {
			case cerr != nil:
				out[i].Err = fmt.Errorf("shard: enqueue %q: %w", as[i].ID, cerr)
			case len(v) != 3*len(idx):
				out[i].Err = fmt.Errorf("shard: enqueue %q: unexpected reply of %d values", as[i].ID, len(v))
			default:
				out[i] = parseEnqueue(as[i], v[3*k:3*k+3])
				if r := &out[i]; !replicated && (r.Err == nil || errors.Is(r.Err, ErrDuplicate)) {
					notRep := fmt.Errorf("%w: %q (WAIT %d replicas, %s)", ErrNotReplicated, as[i].ID, s.wait.Replicas, s.wait.Timeout)
					if r.Err != nil {
						notRep = fmt.Errorf("%w; %w", r.Err, notRep)
					}
					r.Err = notRep
				}
			}
		}
	}
	return out
}

func parseEnqueue(a EnqueueArgs, v []any) EnqueueResult {
	code, _ := v[0].(int64)
	due, _ := v[1].(int64)
	detail, _ := v[2].(string)
	switch code {
	case 1:
		return EnqueueResult{Due: time.UnixMilli(due)}
	case 0:
		r := EnqueueResult{State: detail, Err: fmt.Errorf("%w: %q is %s", ErrDuplicate, a.ID, detail)}
		if due >= 0 {
			r.Due = time.UnixMilli(due)
		}
		return r
	case -1:
		return EnqueueResult{Err: fmt.Errorf("%w: %q (register it in the scheduler's queues config)", ErrUnknownQueue, detail)}
	case -2:
		return EnqueueResult{Err: fmt.Errorf("%w: %d bytes, queue %q allows %s", ErrPayloadTooLarge, len(a.Payload), a.Queue, detail)}
	default:
		return EnqueueResult{Err: fmt.Errorf("%w: %s", ErrInvalidArgument, detail)}
	}
}

// Cancel deletes a task that is not running and returns the state it was
// in. It returns ErrNotFound or ErrActive.
func (s *Store) Cancel(ctx context.Context, id string) (string, error) {
	if !ValidID(id) {
		return "", fmt.Errorf("%w: task id %q", ErrInvalidArgument, id)
	}
	sh := s.l.ShardOf(id)
	v, err := cancelScript.Run(ctx, s.rdb,
		[]string{s.l.Delayed(sh), s.l.Tasks(sh), s.l.Inflight(sh), s.l.Dead(sh), s.l.DeadInfo(sh), s.l.Errors(sh), s.l.Counts(sh)},
		id, s.l.ReadyPrefix(sh), s.l.PendingPrefix(sh)).Slice()
	if err != nil {
		return "", fmt.Errorf("shard: cancel %q: %w", id, err)
	}
	code, _ := v[0].(int64)
	state, _ := v[1].(string)
	switch code {
	case 1:
		return state, nil
	case 0:
		return "", fmt.Errorf("%w: %q", ErrNotFound, id)
	default:
		return state, fmt.Errorf("%w: %q", ErrActive, id)
	}
}

// Info is a task's state as seen by Lookup.
type Info struct {
	State string // scheduled, ready, active or dead
	Task  Task   // zero fields except ID when the data is missing
	// At is the due time (scheduled), lease deadline (active; zero for a
	// task a worker popped and runs without a lease yet) or burial time
	// (dead).
	At time.Time
	// DeadInfo is the JSON burial record of a dead task.
	DeadInfo string
	// LastError is the error of the task's last failed attempt, if any.
	LastError string
	// DecodeErr is set when the stored data is not decodable.
	DecodeErr error
}

// Lookup returns a task's state. It returns ErrNotFound for unknown ids.
func (s *Store) Lookup(ctx context.Context, id string) (Info, error) {
	if !ValidID(id) {
		return Info{}, fmt.Errorf("%w: task id %q", ErrInvalidArgument, id)
	}
	sh := s.l.ShardOf(id)
	v, err := lookupScript.Run(ctx, s.rdb,
		[]string{s.l.Delayed(sh), s.l.Tasks(sh), s.l.Inflight(sh), s.l.Dead(sh), s.l.DeadInfo(sh), s.l.Errors(sh)},
		id, s.l.PendingPrefix(sh), s.l.ReadyPrefix(sh)).StringSlice()
	if err != nil {
		return Info{}, fmt.Errorf("shard: lookup %q: %w", id, err)
	}
	if len(v) != 5 || v[0] == "" {
		return Info{}, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	info := Info{State: v[0], DeadInfo: v[3], LastError: v[4], Task: Task{ID: id}}
	if v[1] != "" {
		info.Task, info.DecodeErr = Decode(id, []byte(v[1]))
		if info.DecodeErr != nil {
			info.Task = Task{ID: id}
		}
	} else {
		info.DecodeErr = fmt.Errorf("%w: %q: no task data", ErrUndecodable, id)
	}
	if v[2] != "" {
		if ms, err := strconv.ParseFloat(v[2], 64); err == nil {
			info.At = time.UnixMilli(int64(ms))
		}
	}
	return info, nil
}
