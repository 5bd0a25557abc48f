package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

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
	if err != nil {
		d.fail(w, err)
		return
	}
	writeJSON(w, map[string]any{"queues": qs, "total": total})
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
func (d *dash) shards(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), ownersTimeout)
	defer cancel()
	layout, err := d.o.Inspector.Layout(ctx)
	if err != nil {
		d.fail(w, err)
		return
	}
	shards, err := d.o.Inspector.Shards(ctx)
	if err != nil && shards == nil {
		d.fail(w, err)
		return
	}
	warning := ""
	if err != nil {
		warning = "owners unknown: " + err.Error()
	}
	writeJSON(w, map[string]any{"layout": layout, "shards": shards, "warning": warning})
}

func (d *dash) dead(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := inspect.DeadFilter{Queue: q.Get("queue"), Reason: q.Get("reason"), ErrorContains: q.Get("error")}
	ctx, cancel := reqCtx(r)
	defer cancel()
	page, err := d.o.Inspector.ListDead(ctx, f, q.Get("cursor"), 50)
	if err != nil {
		d.fail(w, err)
		return
	}
	writeJSON(w, page)
}

func (d *dash) task(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := reqCtx(r)
	defer cancel()
	t, err := d.o.Inspector.Task(ctx, r.URL.Query().Get("id"))
	if err != nil {
		d.fail(w, err)
		return
	}
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
