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

// actions maps an action name in a change's path to what it does to the
// target named by the path.
type actions map[string]func(ctx context.Context, target string) error

// act serves POST .../{param}/{action} with one of acts.
func (d *dash) act(param string, acts actions) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		target, action := r.PathValue(param), r.PathValue("action")
		ctx, cancel := reqCtx(r)
		defer cancel()
		do, ok := acts[action]
		if !ok {
			d.fail(w, fmt.Errorf("%w: action %q", inspect.ErrInvalidArgument, action))
			return
		}
		d.acted(w, r, do(ctx, target), action, target)
	}
}

// changes returns the dashboard's changes by route, each on in.
func changes(in *inspect.Inspector) map[string]actions {
	return map[string]actions{
		"queues/{name}": {"pause": in.Pause, "resume": in.Resume},
		"dead/{id}": {
			"replay": func(ctx context.Context, id string) error { return in.Replay(ctx, id, time.Time{}) },
			"purge":  in.Purge,
		},
		"tasks/{id}": {"cancel": func(ctx context.Context, id string) error { _, err := in.Cancel(ctx, id); return err }},
	}
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
