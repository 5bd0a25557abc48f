package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/hourglass-sched/hourglass/inspect"
)

func reqCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), callTimeout)
}

func (d *dash) config(w http.ResponseWriter, _ *http.Request) {
	in := d.o.Inspector
	writeJSON(w, map[string]any{"read_only": d.o.ReadOnly, "namespace": in.Namespace(), "shards": in.ShardCount()})
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

func (d *dash) shards(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := reqCtx(r)
	defer cancel()
	shards, err := d.o.Inspector.Shards(ctx)
	if err != nil && shards == nil {
		d.fail(w, err)
		return
	}
	warning := ""
	if err != nil {
		warning = "owners unknown: " + err.Error()
	}
	writeJSON(w, map[string]any{"shards": shards, "warning": warning})
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
	writeJSON(w, d.rates.sample(time.Now()))
}

func (d *dash) queueAction(w http.ResponseWriter, r *http.Request) {
	name, action := r.PathValue("name"), r.PathValue("action")
	ctx, cancel := reqCtx(r)
	defer cancel()
	var err error
	switch action {
	case "pause":
		err = d.o.Inspector.Pause(ctx, name)
	case "resume":
		err = d.o.Inspector.Resume(ctx, name)
	default:
		err = fmt.Errorf("%w: action %q (want pause or resume)", inspect.ErrInvalidArgument, action)
	}
	d.acted(w, r, err, action, name)
}

func (d *dash) deadAction(w http.ResponseWriter, r *http.Request) {
	id, action := r.PathValue("id"), r.PathValue("action")
	ctx, cancel := reqCtx(r)
	defer cancel()
	var err error
	switch action {
	case "replay":
		err = d.o.Inspector.Replay(ctx, id, time.Time{})
	case "purge":
		err = d.o.Inspector.Purge(ctx, id)
	default:
		err = fmt.Errorf("%w: action %q (want replay or purge)", inspect.ErrInvalidArgument, action)
	}
	d.acted(w, r, err, action, id)
}

func (d *dash) cancel(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := reqCtx(r)
	defer cancel()
	id := r.PathValue("id")
	_, err := d.o.Inspector.Cancel(ctx, id)
	d.acted(w, r, err, "cancel", id)
}

// acted answers a change and logs it (who: the remote address).
func (d *dash) acted(w http.ResponseWriter, r *http.Request, err error, action, target string) {
	if err != nil {
		d.fail(w, err)
		return
	}
	d.o.Log.Info("dashboard change", "action", action, "target", target, "remote", r.RemoteAddr)
	writeJSON(w, map[string]string{"action": action, "target": target})
}
