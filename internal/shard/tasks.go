package shard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/errtext"
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
	// Priority is the task's level (PriorityNormal: none).
	Priority Priority
	// TraceParent, when set, is the W3C traceparent (ValidTraceParent)
	// the task carries to its worker (docs/protocol.md, "Traces").
	TraceParent string
	// UniqueFor, above zero, reserves the id that long from the enqueue
	// (unique.lua): an enqueue with UniqueFor of the same id is refused
	// as a duplicate ("reserved") until then, even after the task
	// finished.
	UniqueFor time.Duration
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
	payload := a.Payload
	switch {
	case a.TraceParent != "":
		retries += ":" + strconv.Itoa(int(a.Priority)) + "t"
		payload = append([]byte(a.TraceParent), a.Payload...)
	case a.Priority != PriorityNormal:
		retries += ":" + strconv.Itoa(int(a.Priority))
	}
	if a.Timeout > 0 {
		timeout = strconv.FormatInt(a.Timeout.Milliseconds(), 10)
	}
	return []any{a.ID, due, a.Queue, retries, timeout, payload}
}

// enqueueChunk bounds the tasks of one script call, so that no call keeps
// Redis busy for long.
const enqueueChunk = 256

// Enqueue stores one task in its shard.
func (s *Store) Enqueue(ctx context.Context, a EnqueueArgs) EnqueueResult {
	return s.EnqueueBatch(ctx, []EnqueueArgs{a})[0]
}

// EnqueueBatch stores many tasks in one pipelined round trip: one script
// call per shard (per enqueueChunk tasks), and one unique.lua call per
// task with UniqueFor (a second round trip when a batch mixes both).
// Each result reports its own outcome.
//
// Tasks are placed by the store's layout, and each call carries its
// generation. A shard whose marker has a newer one refuses the call
// (ErrLayoutChanged, nothing written): the store adopts that layout and
// sends those tasks again, placed by it. While a change of the shard
// count runs, an id whose shard changes is first looked for in its old
// shard, where it may still be live: it is a duplicate there.
func (s *Store) EnqueueBatch(ctx context.Context, as []EnqueueArgs) []EnqueueResult {
	out := make([]EnqueueResult, len(as))
	todo := make([]int, len(as))
	for i := range todo {
		todo[i] = i
	}
	for attempt := 0; len(todo) > 0; attempt++ {
		l := s.Layout()
		redirected := s.enqueueOnce(ctx, l, as, todo, out)
		if len(redirected) == 0 || attempt == maxRedirects {
			return out
		}
		todo = redirected
	}
	return out
}

// maxRedirects bounds how often one EnqueueBatch follows a newer layout.
const maxRedirects = 3

// enqueueOnce sends the tasks as[i] for i in todo, placed by l, and
// writes their results to out. It returns the tasks a shard refused
// because its layout is newer (adopted by the store), to be sent again.
func (s *Store) enqueueOnce(ctx context.Context, l Layout, as []EnqueueArgs, todo []int, out []EnqueueResult) (redirected []int) {
	byShard := make(map[int][]int)
	for _, i := range s.liveInOldShards(ctx, l, as, todo, out) {
		sh := l.ShardOf(as[i].ID)
		byShard[sh] = append(byShard[sh], i)
	}
	gen := "@" + strconv.FormatInt(l.Gen(), 10)
	var calls, uniques []scriptCall
	var members, uniqueMembers [][]int // task indexes of each call
	for sh, idx := range byShard {
		keys := []string{l.Delayed(sh), l.Tasks(sh), l.Queues(sh), l.Far(sh), l.Counts(sh), l.Marker(sh)}
		plain := idx[:0] // filtered in place: byShard's slices are this call's own
		for _, i := range idx {
			if as[i].UniqueFor <= 0 {
				plain = append(plain, i)
				continue
			}
			// One call each: unique.lua reserves one id.
			args := append([]any{as[i].UniqueFor.Milliseconds(), gen, l.WakeChannel(sh)}, enqueueArgs(as[i])...)
			uniques = append(uniques, scriptCall{keys: append(slices.Clone(keys), l.Reservation(sh, as[i].ID)), args: args})
			uniqueMembers = append(uniqueMembers, []int{i})
		}
		for idx = plain; len(idx) > 0; idx = idx[min(len(idx), enqueueChunk):] {
			n := min(len(idx), enqueueChunk)
			args := make([]any, 2, 2+6*n)
			args[0], args[1] = gen, l.WakeChannel(sh)
			for _, i := range idx[:n] {
				args = append(args, enqueueArgs(as[i])...)
			}
			calls = append(calls, scriptCall{keys: keys, args: args})
			members = append(members, idx[:n])
		}
	}
	redirected = s.sendEnqueues(ctx, enqueueScript, calls, members, as, out)
	return append(redirected, s.sendEnqueues(ctx, uniqueScript, uniques, uniqueMembers, as, out)...)
}

// sendEnqueues sends the enqueue calls of one script (enqueue.lua, or
// unique.lua for tasks with UniqueFor), members[c] being the indexes in
// as of call c's tasks, writes their results to out, and returns the
// tasks a shard refused because its layout is newer.
func (s *Store) sendEnqueues(ctx context.Context, sc script, calls []scriptCall, members [][]int, as []EnqueueArgs, out []EnqueueResult) (redirected []int) {
	if len(calls) == 0 {
		return nil
	}
	cmds, err := sc.runPipelinedOnce(ctx, s.rdb, calls)
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
		if nl, ok := s.layoutFromError(cerr); ok {
			s.SetLayout(nl)
			for _, i := range idx {
				out[i].Err = fmt.Errorf("%w: %q: now generation %d with %d shards", ErrLayoutChanged, as[i].ID, nl.Gen(), nl.Shards())
			}
			redirected = append(redirected, idx...)
			continue
		}
		for k, i := range idx {
			switch {
			case cerr != nil:
				out[i].Err = errtext.Errorf("enqueue %q: %w", as[i].ID, cerr)
			case len(v) != 3*len(idx):
				out[i].Err = errtext.Errorf("enqueue %q: unexpected reply of %d values", as[i].ID, len(v))
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
	return redirected
}

// liveInOldShards returns the tasks of todo to send. While l's change
// runs, a task whose id moves (Homes) may still be live in its old home,
// stored there or on its way out in the outbox: such a task is a
// duplicate, reported in out and not sent. The old home is checked before
// the new one is written, in the locator's order: nothing can store the
// id in the old home after this check (a producer on the old layout is
// redirected), and the reshard copies a task to its new home before it
// removes it from the old one, so a check that misses it there means the
// enqueue script finds it in the new home.
func (s *Store) liveInOldShards(ctx context.Context, l Layout, as []EnqueueArgs, todo []int, out []EnqueueResult) []int {
	if !l.Resharding() {
		return todo
	}
	type check struct {
		i                     int
		h                     Homes
		data, sent, cancelled *redis.BoolCmd
	}
	var checks []check
	pipe := s.rdb.Pipeline()
	for _, i := range todo {
		if h := l.Homes(as[i].ID); h.Moving() {
			id := h.ID
			checks = append(checks, check{i, h, pipe.HExists(ctx, s.k.Tasks(h.Old), id), pipe.HExists(ctx, s.k.Outbox(h.Old), id),
				pipe.HExists(ctx, s.k.Cancelled(h.Old), id)})
		}
	}
	if len(checks) == 0 {
		return todo
	}
	_, err := pipe.Exec(ctx)
	live := make(map[int]bool)
	for _, c := range checks {
		switch {
		case err != nil:
			out[c.i].Err = errtext.Errorf("enqueue %q: look in its old shard: %w", c.h.ID, err)
			live[c.i] = true
		case c.cancelled.Val():
			// Its imported copy is about to be removed: storing the id
			// now would be reported a duplicate, then deleted with it.
			out[c.i] = EnqueueResult{Err: fmt.Errorf("%w: %q was cancelled on its way to shard %d", ErrInTransit, c.h.ID, c.h.New)}
			live[c.i] = true
		case c.data.Val() || c.sent.Val():
			out[c.i] = EnqueueResult{State: "live in its old shard", Err: fmt.Errorf("%w: %q is live in its old shard %d (the shard count is changing)", ErrDuplicate, c.h.ID, c.h.Old)}
			live[c.i] = true
		}
	}
	send := todo[:0:0]
	for _, i := range todo {
		if !live[i] {
			send = append(send, i)
		}
	}
	return send
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

// Info is a task's state as seen by Lookup.
type Info struct {
	State string // scheduled, ready, active or dead; succeeded or cancelled (Ended)
	Task  Task   // zero fields except ID when the data is missing
	// Shard is the shard the task was found in (during a change of the
	// shard count, its old or its new home).
	Shard int
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
	// Ended is set for a task read from its record (Retention): State is
	// "succeeded" or "cancelled", At when it ended, Task has its ID and
	// Queue only, and Result holds what the handler returned.
	Ended  bool
	Result []byte
	// CorruptDue is set for a scheduled task whose delayed-set score is
	// not a due time (ValidDue): the owner's recovery dead-letters it
	// with the reason "corrupt due time". At is then zero.
	CorruptDue bool
}

// noData reports a task whose data is missing: it is undecodable.
func noData(id string) error { return fmt.Errorf("%w: %q: no task data", ErrUndecodable, id) }

// MaxDue is the latest due time the enqueue script accepts, unix ms (13
// digits): a delayed-set score beyond it, or below 0, is a corrupt due
// time (lib.lua's valid_due).
const MaxDue = 9_999_999_999_999

// ValidDue reports whether a delayed-set score is a due time: 0..MaxDue,
// finite. The mover and the recovery pass dead-letter members whose
// score is not ("corrupt due time"); listings and lookups report them.
func ValidDue(score float64) bool { return score >= 0 && score <= MaxDue }

// Lookup returns a task's state, wherever a change of the shard count
// has it (the locator's order). It returns ErrNotFound for unknown ids.
func (s *Store) Lookup(ctx context.Context, id string) (Info, error) {
	if !ValidStoredID(id) {
		return Info{}, fmt.Errorf("%w: task id %q", ErrInvalidArgument, id)
	}
	var info Info
	err := s.find(ctx, id, func(ctx context.Context, p Place) (bool, error) {
		in, err := s.lookupIn(ctx, p, id)
		if errors.Is(err, ErrNotFound) {
			return false, nil
		}
		info = in
		return true, err
	})
	return info, err
}

// lookupIn looks id up in one place: a shard, with its outbox for an
// outbox place (lookup.lua declares the outbox only, not the cancelled
// entries).
func (s *Store) lookupIn(ctx context.Context, p Place, id string) (Info, error) {
	sh := p.Shard
	keys := []string{s.k.Delayed(sh), s.k.Tasks(sh), s.k.Inflight(sh), s.k.Dead(sh), s.k.DeadInfo(sh), s.k.Errors(sh)}
	if ob := s.k.OutboxKeys(p); ob != nil {
		keys = append(keys, ob[0])
	}
	v, err := lookupScript.Run(ctx, s.rdb, keys, id, s.k.PendingPrefix(sh), s.k.ReadyPrefix(sh), s.k.Ended(sh)).StringSlice()
	if err != nil {
		return Info{}, errtext.Errorf("lookup %q: %w", id, err)
	}
	if len(v) == 2 && v[0] == "ended" {
		if info, ok := parseRecord(id, sh, v[1]); ok {
			return info, nil
		}
		return Info{}, taskNotFound(id) // a record that does not parse: written by hand
	}
	if len(v) != 5 || v[0] == "" {
		return Info{}, taskNotFound(id)
	}
	info := Info{State: v[0], Shard: sh, DeadInfo: v[3], LastError: v[4], Task: Task{ID: id}}
	if v[1] != "" {
		info.Task, info.DecodeErr = s.DecodeIn(sh, id, []byte(v[1]))
		if info.DecodeErr != nil {
			info.Task = Task{ID: id}
		}
	} else {
		info.DecodeErr = noData(id)
	}
	if v[2] != "" {
		ms, err := strconv.ParseFloat(v[2], 64)
		switch {
		case info.State == "scheduled" && (err != nil || !ValidDue(ms)):
			info.CorruptDue = true
		case err == nil:
			info.At = time.UnixMilli(int64(ms))
		}
	}
	return info, nil
}
