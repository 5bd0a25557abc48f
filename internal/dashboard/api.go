package dashboard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hourglass-sched/hourglass"
	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/periodic"
)

func reqCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), callTimeout)
}

// config answers the dashboard's settings and the shard count: the
// layout record's, or when it cannot be read, the one last read.
func (d *dash) config(w http.ResponseWriter, r *http.Request) {
	in := d.o.Inspector
	shards := in.ShardCount()
	ctx, cancel := reqCtx(r)
	defer cancel()
	if l, err := in.Layout(ctx); err == nil {
		shards = l.Shards
	}
	writeJSON(w, map[string]any{"read_only": d.o.ReadOnly, "namespace": in.Namespace(), "shards": shards})
}

func (d *dash) queues(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := reqCtx(r)
	defer cancel()
	qs, total, err := d.o.Inspector.Queues(ctx)
	if err != nil && !errors.Is(err, inspect.ErrPartial) {
		d.fail(w, err)
		return
	}
	writeJSON(w, map[string]any{"queues": qs, "total": total, "warning": partialWarning(err)})
}

// partialWarning is the warning the page shows for a partial read
// (inspect.ErrPartial: some shards could not be read), "" otherwise.
func partialWarning(err error) string {
	if errors.Is(err, inspect.ErrPartial) {
		return err.Error()
	}
	return ""
}

// scheduleDefs returns the schedules the dashboard shows.
func (d *dash) scheduleDefs() []*periodic.Compiled {
	if d.o.Schedules == nil {
		return nil
	}
	return d.o.Schedules()
}

func (d *dash) schedules(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := reqCtx(r)
	defer cancel()
	// One more than shown: the first may be recorded already.
	ss, err := d.o.Inspector.Schedules(ctx, d.scheduleDefs(), time.Now(), nextOccurrences+1)
	if err != nil {
		d.fail(w, err)
		return
	}
	for k := range ss {
		ss[k].Next = upcoming(ss[k])
	}
	writeJSON(w, map[string]any{"schedules": ss})
}

// upcoming returns the first nextOccurrences of s.Next that are later
// than its last recorded occurrence: the owner fires an occurrence up to
// fire.Lead before it, and once fired it is no longer next (the page
// would show the same time as last fired and next).
func upcoming(s inspect.ScheduleInfo) []time.Time {
	next := slices.DeleteFunc(s.Next, func(t time.Time) bool { return !t.After(s.LastRecorded) })
	return next[:min(len(next), nextOccurrences)]
}

// pauseSchedule pauses a schedule the dashboard shows: a pause of any
// other name would pause nothing that fires (a typo), so it is a 404, as
// the CLI refuses it.
func (d *dash) pauseSchedule(ctx context.Context, name string) error {
	if !slices.ContainsFunc(d.scheduleDefs(), func(c *periodic.Compiled) bool { return c.Name == name }) {
		return fmt.Errorf("%w: schedule %q is neither configured nor registered", inspect.ErrNotFound, name)
	}
	return d.o.Inspector.PauseSchedule(ctx, name)
}

// shards answers the layout record (inspect.LayoutStatus: the shard
// count and the progress of a change of it) and the shards it lists.
// procCache keeps the processes' last listing for procTTL: it reads
// CLIENT LIST of every primary, work on Redis's main thread that grows
// with its clients, and every open page asks each refresh.
type procCache struct {
	mu sync.Mutex
	at time.Time
	ps []inspect.Process
}

// procTTL is how long a listing of the processes is served again.
const procTTL = 10 * time.Second

// processes lists the live schedulers and workers (inspect.Processes),
// at most once per procTTL.
func (d *dash) processes(w http.ResponseWriter, r *http.Request) {
	c := &d.procs
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ps == nil || time.Since(c.at) > procTTL {
		// Bounded: the other pages' requests wait on the lock.
		ctx, cancel := context.WithTimeout(r.Context(), ownersTimeout)
		defer cancel()
		ps, err := d.o.Inspector.Processes(ctx)
		if err != nil {
			d.fail(w, err)
			return
		}
		c.ps, c.at = ps, time.Now()
	}
	writeJSON(w, map[string]any{"processes": c.ps})
}

// shards returns the layout and the shards' owners.
func (d *dash) shards(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), ownersTimeout)
	defer cancel()
	layout, lerr := d.o.Inspector.Layout(ctx)
	if lerr != nil && !errors.Is(lerr, inspect.ErrPartial) {
		d.fail(w, lerr)
		return
	}
	shards, err := d.o.Inspector.Shards(ctx)
	if err != nil && shards == nil {
		d.fail(w, err)
		return
	}
	warning := partialWarning(err)
	if err != nil && warning == "" {
		warning = "owners unknown: " + err.Error()
	}
	if warning == "" {
		warning = partialWarning(lerr)
	}
	writeJSON(w, map[string]any{"layout": layout, "shards": shards, "warning": warning})
}

// deadFilter is the dead-letter filter of r's query: queue, reason and
// error (a substring of the last error).
func deadFilter(r *http.Request) inspect.DeadFilter {
	q := r.URL.Query()
	return inspect.DeadFilter{Queue: q.Get("queue"), Reason: q.Get("reason"), ErrorContains: q.Get("error")}
}

// deadAll replays (due now) or purges, as op says, every dead letter
// matching the query's filter, as hourglass dlq replay --all and purge
// --all do; the answer counts those done and examined. One request is
// bounded as every change is (10 s): a set too large for that is done in
// part, and the answer's error says how far (hourglass dlq replay --all
// has no such bound).
//
// The query may hold only those keys and "all": without a filter, all=1
// must say that every dead letter is meant, so that a misspelt key
// (?errors=) never widens the action to all of them.
func (d *dash) deadAll(ctx context.Context, r *http.Request, op string) (map[string]any, error) {
	q := r.URL.Query()
	for k := range q {
		if k != "queue" && k != "reason" && k != "error" && k != "all" && k != "until" {
			return nil, fmt.Errorf("%w: unknown parameter %q (queue, reason, error, all, until)", inspect.ErrInvalidArgument, k)
		}
	}
	f := deadFilter(r)
	if f == (inspect.DeadFilter{}) && q.Get("all") != "1" {
		return nil, fmt.Errorf("%w: no filter: pass all=1 to %s every dead letter", inspect.ErrInvalidArgument, op)
	}
	// until (unix ms) leaves out the letters buried since the action's
	// first part: a task a part replayed that died again is not replayed
	// again by the next part. The first part takes now.
	f.Until = time.Now()
	if u := q.Get("until"); u != "" {
		ms, err := strconv.ParseInt(u, 10, 64)
		if err != nil || ms <= 0 {
			return nil, fmt.Errorf("%w: until %q is not unix milliseconds", inspect.ErrInvalidArgument, u)
		}
		f.Until = time.UnixMilli(ms)
	}
	// A large set is done in parts of at most BulkPart each: a part that
	// runs out of time answers "more", and the page sends the request
	// again for the rest (what a part did is no longer dead).
	pctx, cancel := context.WithTimeout(ctx, cmp.Or(d.o.BulkPart, DefaultBulkPart))
	defer cancel()
	var p inspect.Progress
	var err error
	switch op {
	case "replay":
		p, err = d.o.Inspector.ReplayDead(pctx, f, time.Time{}, nil)
	case "purge":
		p, err = d.o.Inspector.PurgeDead(pctx, f, nil)
	default:
		return nil, fmt.Errorf("%w: bulk action %q (want replay or purge)", inspect.ErrInvalidArgument, op)
	}
	more := err != nil && pctx.Err() != nil && ctx.Err() == nil
	if more {
		err = nil
	}
	// The change's own log line names neither the filter nor the counts.
	d.o.Log.Info("dashboard bulk action on dead letters", "action", op, "queue", f.Queue, "reason", f.Reason, "error_contains", f.ErrorContains,
		"done", p.Done, "scanned", p.Scanned, "more", more, "remote", r.RemoteAddr, "error", err)
	if err != nil {
		return nil, fmt.Errorf("%s of %d dead letters done before: %w", op, p.Done, err)
	}
	return map[string]any{"done": p.Done, "scanned": p.Scanned, "more": more, "until": f.Until.UnixMilli()}, nil
}

// DefaultBulkPart is Options.BulkPart's default, within the request's
// own bound of 10 s.
const DefaultBulkPart = 8 * time.Second

func (d *dash) dead(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := deadFilter(r)
	ctx, cancel := reqCtx(r)
	defer cancel()
	page, err := d.o.Inspector.ListDead(ctx, f, q.Get("cursor"), 50)
	if err != nil {
		d.fail(w, err)
		return
	}
	writeJSON(w, page)
}

// recentShown is how many ended tasks GET recent answers.
const recentShown = 50

// recent answers the most recently ended tasks of the queue named by the
// query parameter "queue" (inspect.Recent), with their results.
func (d *dash) recent(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := reqCtx(r)
	defer cancel()
	ts, err := d.o.Inspector.Recent(ctx, r.URL.Query().Get("queue"), recentShown)
	if err != nil {
		d.fail(w, err)
		return
	}
	writeJSON(w, map[string]any{"tasks": ts})
}

// historyShown is how many outcomes GET schedulehistory answers.
const historyShown = 50

// scheduleHistory answers the last outcomes of schedule ?name=
// (inspect.ScheduleHistory), newest first.
func (d *dash) scheduleHistory(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := reqCtx(r)
	defer cancel()
	h, err := d.o.Inspector.ScheduleHistory(ctx, r.URL.Query().Get("name"), historyShown)
	if err != nil {
		d.fail(w, err)
		return
	}
	writeJSON(w, map[string]any{"history": h})
}

// weights answers the keys of queue ?queue= that have a weight or a
// concurrency cap of their own (a fair queue's; docs/fairness.md):
// {"weights": {"key": n, ...}, "caps": inspect.KeyCaps}.
func (d *dash) weights(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := reqCtx(r)
	defer cancel()
	q := r.URL.Query().Get("queue")
	ws, err := d.o.Inspector.KeyWeights(ctx, q)
	if err != nil {
		d.fail(w, err)
		return
	}
	caps, err := d.o.Inspector.KeyConcurrency(ctx, q)
	if err != nil {
		d.fail(w, err)
		return
	}
	writeJSON(w, map[string]any{"weights": ws, "caps": caps})
}

// keycap sets the concurrency cap of key ?key= of the queue to
// ?concurrency= (0: none; "default": the queue's), as hourglass queue
// keycap does.
func (d *dash) keycap(ctx context.Context, r *http.Request, queue string) error {
	q := r.URL.Query()
	if q.Get("concurrency") == "default" {
		return d.o.Inspector.ClearKeyConcurrency(ctx, queue, q.Get("key"))
	}
	n, err := strconv.Atoi(q.Get("concurrency"))
	if err != nil {
		return fmt.Errorf("%w: concurrency %q is not a whole number or default", inspect.ErrInvalidArgument, q.Get("concurrency"))
	}
	return d.o.Inspector.SetKeyConcurrency(ctx, queue, q.Get("key"), n)
}

// weight sets the weight of key ?key= of the queue to ?weight= (0
// pauses the key), as hourglass queue weight does.
func (d *dash) weight(ctx context.Context, r *http.Request, queue string) error {
	q := r.URL.Query()
	n, err := strconv.Atoi(q.Get("weight"))
	if err != nil {
		return fmt.Errorf("%w: weight %q is not a whole number", inspect.ErrInvalidArgument, q.Get("weight"))
	}
	return d.o.Inspector.SetKeyWeight(ctx, queue, q.Get("key"), n)
}

// keyrate sets the rate of key ?key= of the queue to ?rate= per ?period=
// (a Go duration, default 1s) by the limiter ?kind= (default
// token_bucket) with bursts of ?burst= (default 1); rate 0: none;
// "default": the queue's. As hourglass queue keyrate does.
func (d *dash) keyrate(ctx context.Context, r *http.Request, queue string) error {
	q := r.URL.Query()
	if q.Get("rate") == "default" {
		return d.o.Inspector.ClearKeyRate(ctx, queue, q.Get("key"))
	}
	var kr inspect.KeyRate
	var err error
	if kr.Rate, err = strconv.Atoi(q.Get("rate")); err != nil {
		return fmt.Errorf("%w: rate %q is not a whole number or default", inspect.ErrInvalidArgument, q.Get("rate"))
	}
	if p := q.Get("period"); p != "" {
		if kr.Period, err = time.ParseDuration(p); err != nil {
			return fmt.Errorf("%w: period %q is not a duration", inspect.ErrInvalidArgument, p)
		}
	}
	if b := q.Get("burst"); b != "" {
		if kr.Burst, err = strconv.Atoi(b); err != nil {
			return fmt.Errorf("%w: burst %q is not a whole number", inspect.ErrInvalidArgument, b)
		}
	}
	kr.Kind = q.Get("kind")
	return d.o.Inspector.SetKeyRate(ctx, queue, q.Get("key"), kr)
}

// TaskPayloadCap bounds the payload GET task answers (the page's task
// view shows it): a longer one is cut to its first TaskPayloadCap bytes,
// and payload_size says how long the whole is (hourglass task show ID
// -o json prints all of it). GET dead, a listing, carries
// inspect.PreviewBytes of each payload.
const TaskPayloadCap = 64 << 10

func (d *dash) task(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := reqCtx(r)
	defer cancel()
	t, err := d.o.Inspector.Task(ctx, r.URL.Query().Get("id"))
	if err != nil {
		d.fail(w, err)
		return
	}
	t.Payload = t.Payload[:min(len(t.Payload), TaskPayloadCap)]
	writeJSON(w, t)
}

func (d *dash) stats(w http.ResponseWriter, _ *http.Request) {
	st, err := stats(d.o.Gatherer)
	if err != nil {
		d.fail(w, err)
		return
	}
	writeJSON(w, st)
}

// reschedule moves pending task id to the time of the query parameter
// "at": RFC 3339, or a delay ("10m": in ten minutes), as the CLI's --at.
func (d *dash) reschedule(ctx context.Context, r *http.Request, id string) error {
	at := r.URL.Query().Get("at")
	due, err := time.Parse(time.RFC3339, at)
	if err != nil {
		delay, derr := time.ParseDuration(at)
		if derr != nil || delay < 0 {
			return fmt.Errorf("%w: at %q is neither an RFC 3339 time nor a delay such as 10m", inspect.ErrInvalidArgument, at)
		}
		due = time.Now().Add(delay)
	}
	_, err = d.o.Inspector.Reschedule(ctx, id, due)
	return err
}

// maxReplaceBody bounds the payload a replace request may send; the
// queue's max_payload bounds it further.
const maxReplaceBody = 16 << 20

// replace gives pending task id the request's body as its payload.
func (d *dash) replace(ctx context.Context, r *http.Request, id string) error {
	payload, err := io.ReadAll(io.LimitReader(r.Body, maxReplaceBody+1))
	switch {
	case err != nil:
		return fmt.Errorf("%w: reading the payload: %v", inspect.ErrInvalidArgument, err)
	case len(payload) > maxReplaceBody:
		return fmt.Errorf("%w: a payload above %d bytes", hourglass.ErrPayloadTooLarge, maxReplaceBody)
	}
	return d.o.Inspector.Replace(ctx, id, payload)
}
