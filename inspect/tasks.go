package inspect

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"time"

	"github.com/hourglass-sched/hourglass"
	"github.com/hourglass-sched/hourglass/internal/shard"
)

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
	// Limit bounds the tasks returned and the entries each script call
	// examines (default 100, at most 1000). With a Queue filter a page
	// may be short, or empty with a non-empty Cursor: keep paging until
	// the Cursor is "".
	Limit int
}

// Page is one page of a listing. Cursor is "" when the listing is
// complete. A listing visits the shards in turn (for scheduled tasks: a
// shard's far tier, then its delayed set); a task that stays put is
// listed exactly once, a task that changes state while the listing runs
// may be listed in neither state or in both. The shards are those of the
// layout record, read again for each page: while the shard count
// changes, 0..Existing-1, and a task moved to its new shard during the
// listing may be listed twice or not at all, as a task that changes
// state. A cursor naming a shard a shrink has since removed ends the
// listing.
type Page struct {
	Tasks  []Task `json:"tasks"`
	Cursor string `json:"cursor"`
}

// DefaultLimit and MaxLimit bound a page; PreviewBytes bounds the
// payload of each task listed (Task.Payload), so a page holds at most
// MaxLimit small tasks whatever their payloads. Task returns a whole
// payload.
const (
	DefaultLimit = 100
	MaxLimit     = shard.MaxPage
	PreviewBytes = shard.PagePreview
)

// cursor is a listing's position, opaque to callers (base64 of JSON).
type cursor struct {
	State State             `json:"st"`
	Queue string            `json:"q,omitempty"`
	Dead  *DeadFilter       `json:"df,omitempty"`
	Shard int               `json:"sh"`
	Far   bool              `json:"far,omitempty"` // scheduled: in the shard's far tier
	Set   shard.Cursor      `json:"c"`
	FarC  shard.FarCursor   `json:"f"`
	Ready shard.ReadyCursor `json:"r"`
	// Newest marks a newest-first listing of dead letters across shards
	// (ListDead): Set is then its frontier in every shard.
	Newest bool `json:"nw,omitempty"`
}

func (c cursor) encode() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string) (cursor, error) {
	var c cursor
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err != nil {
		return c, errorf(ErrInvalidArgument, "malformed cursor")
	}
	return c, nil
}

// start returns the cursor of a listing's first entry in shard sh.
func (c cursor) start(sh int) cursor {
	return cursor{State: c.State, Queue: c.Queue, Dead: c.Dead, Shard: sh, Far: c.State == StateScheduled}
}

// ListTasks returns a page of the tasks in opts.State.
func (i *Inspector) ListTasks(ctx context.Context, opts ListOptions) (Page, error) {
	switch opts.State {
	case StateScheduled, StateActive, StateDead:
	case StateReady:
		if opts.Queue == "" {
			return Page{}, errorf(ErrInvalidArgument, "listing ready tasks needs a queue")
		}
	default:
		return Page{}, errorf(ErrInvalidArgument, "invalid state %q (want scheduled, ready, active or dead)", opts.State)
	}
	c := cursor{State: opts.State, Queue: opts.Queue}.start(0)
	if opts.Cursor != "" {
		var err error
		if c, err = decodeCursor(opts.Cursor); err != nil {
			return Page{}, err
		}
		if c.State != opts.State || c.Queue != opts.Queue || c.Dead != nil {
			return Page{}, errorf(ErrInvalidArgument, "the cursor belongs to another listing")
		}
	}
	return i.page(ctx, c, opts.Limit)
}

// page continues the listing at c: script calls of at most the room left
// on the page each, until the page is full, the listing ends, or every
// shard was visited once (at most two calls per shard).
func (i *Inspector) page(ctx context.Context, c cursor, limit int) (Page, error) {
	if limit <= 0 {
		limit = DefaultLimit
	}
	limit = min(limit, MaxLimit)
	if c.Shard < 0 || c.Shard >= shard.MaxShards {
		return Page{}, errorf(ErrInvalidArgument, "the cursor names shard %d", c.Shard)
	}
	l, err := i.layout(ctx)
	if err != nil {
		return Page{}, err
	}
	n := l.Existing()
	p := Page{Tasks: []Task{}}
	if c.Shard >= n {
		return p, nil // the shard was removed by a shrink: nothing left to list
	}
	for calls := 0; calls < 2*n && len(p.Tasks) < limit; calls++ {
		tasks, done, err := i.step(ctx, &c, limit-len(p.Tasks))
		if err != nil {
			return Page{}, err
		}
		p.Tasks = append(p.Tasks, tasks...)
		if !done {
			continue
		}
		switch {
		case c.Far:
			c.Far, c.FarC = false, shard.FarCursor{}
		case c.Shard+1 < n:
			c = c.start(c.Shard + 1)
		default:
			return p, nil // the listing is complete
		}
	}
	p.Cursor = c.encode()
	return p, nil
}

// step makes one bounded script call at c and advances c.
func (i *Inspector) step(ctx context.Context, c *cursor, limit int) ([]Task, bool, error) {
	var (
		es   []shard.Entry
		done bool
		err  error
	)
	switch {
	case c.State == StateReady:
		es, c.Ready, done, err = i.store.PageReady(ctx, c.Shard, c.Queue, c.Ready, limit)
	case c.Far:
		es, c.FarC, done, err = i.store.PageFar(ctx, c.Shard, c.FarC, limit, c.Queue)
	default:
		kind := map[State]shard.SetKind{StateScheduled: shard.SetDelayed, StateActive: shard.SetInflight, StateDead: shard.SetDead}[c.State]
		es, c.Set, done, err = i.store.PageSet(ctx, c.Shard, kind, c.Set, limit, c.filter())
	}
	if err != nil {
		return nil, false, mapErr(err)
	}
	out := make([]Task, len(es))
	for k, e := range es {
		out[k] = e.View(string(c.State), c.Shard)
	}
	return out, done, nil
}

func (c cursor) filter() shard.Filter {
	f := shard.Filter{Queue: c.Queue}
	if d := c.Dead; d != nil {
		f.Queue, f.Reason, f.ErrorContains = d.Queue, d.Reason, d.ErrorContains
		if !d.Since.IsZero() {
			f.Min = d.Since.UnixMilli()
		}
		if !d.Until.IsZero() {
			f.Max = d.Until.UnixMilli() - 1 // Until is exclusive
		}
	}
	return f
}

// Task looks up one task by id, in any state, wherever a change of the
// shard count has it; Task.Shard is the shard it was found in.
// ErrNotFound if no such task is stored.
func (i *Inspector) Task(ctx context.Context, id string) (Task, error) {
	info, err := i.store.Lookup(ctx, id)
	if err != nil {
		return Task{}, mapErr(err)
	}
	return info.View(), nil
}

// MaxRecent is the most records Recent returns.
const MaxRecent = 1000

// Recent returns the most recently ended tasks of queue, newest first, at
// most limit (up to MaxRecent): those succeeded (with their results) and
// cancelled, as the queue's retention keeps them (queues.<q>.retention;
// a queue that keeps none has only the tasks cancelled while running).
// Dead tasks are listed by ListDead. Each Task has its ID, Queue, State,
// Ended and Result. Two pipelined round trips over the layout's shards.
func (i *Inspector) Recent(ctx context.Context, queue string, limit int) ([]Task, error) {
	l, err := i.layout(ctx)
	if err != nil {
		return nil, err
	}
	if !shard.ValidQueue(queue) {
		return nil, errorf(ErrInvalidArgument, "queue name %q", queue)
	}
	recs, err := i.store.Recent(ctx, span(l), queue, min(max(limit, 1), MaxRecent))
	if err != nil {
		return nil, mapErr(err)
	}
	out := make([]Task, len(recs))
	for k, r := range recs {
		out[k] = r.View()
	}
	return out, nil
}

// Reschedule moves the pending task id (scheduled, or ready and not
// taken by a worker) to at, earlier or later, keeping its id, payload,
// attempts and last error, and returns its new due time. ErrNotFound,
// ErrActive if a worker has it, ErrDead for a dead letter (Replay it),
// ErrInvalidArgument; while a change of the shard count moves it, an
// error wrapping its "try again" (nothing changed).
func (i *Inspector) Reschedule(ctx context.Context, id string, at time.Time) (time.Time, error) {
	if at.IsZero() {
		return time.Time{}, errorf(ErrInvalidArgument, "reschedule %q to the zero time", id)
	}
	r, err := i.store.Change(ctx, id, shard.Change{SetDue: true, Due: at})
	return r.Due, mapErr(err)
}

// Replace gives the pending task id a new payload, keeping everything
// else (a ready task keeps its turn). Errors as Reschedule's, and
// hourglass.ErrPayloadTooLarge above the queue's max_payload.
func (i *Inspector) Replace(ctx context.Context, id string, payload []byte) error {
	if payload == nil {
		payload = []byte{}
	}
	_, err := i.store.Change(ctx, id, shard.Change{Payload: payload})
	return mapErr(err)
}

// SetPriority changes the level of the pending task id, as
// client.SetPriority does: a task of a fair queue waiting for its key's
// turn moves to the end of the key's tasks of that level
// (docs/fairness.md, "Priorities"). Errors as Reschedule's.
func (i *Inspector) SetPriority(ctx context.Context, id string, p hourglass.Priority) error {
	if !p.Valid() {
		return errorf(ErrInvalidArgument, "priority %d of %q", int(p), id)
	}
	_, err := i.store.Change(ctx, id, shard.Change{SetPriority: true, Priority: p})
	return mapErr(err)
}

// Cancel ends a task in any state and returns the state it was in, as
// client.Cancel does: a scheduled, ready or dead task is deleted; a
// running one (active) ends as cancelled, its lease revoked and its
// worker told to cancel the handler's ctx. Its id can be enqueued again
// afterwards. ErrNotFound if no such task.
func (i *Inspector) Cancel(ctx context.Context, id string) (State, error) {
	st, q, err := i.store.CancelQueue(ctx, id)
	if err == nil && st != string(StateDead) {
		i.countCancelled(ctx, q)
	}
	return State(st), mapErr(err)
}
