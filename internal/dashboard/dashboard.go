// Package dashboard is the scheduler's web dashboard: a page (embedded
// assets, nothing fetched from the internet) and a JSON API under /ui/,
// both faces of the public inspect package. It shows queues with their
// depths and state, the replica's move rate and lateness, shard owners,
// dead letters and task lookup, and offers pause, resume, replay, purge
// and cancel unless it is read-only.
//
// Protection: the scheduler's HTTP address binds loopback by default;
// optional basic auth (constant-time comparison); changes need POST with
// the header X-Hourglass-UI (a cross-site form cannot send it), and are
// refused with 403 in read-only mode.
package dashboard

import (
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hourglass-sched/hourglass/inspect"
)

//go:embed assets
var assets embed.FS

// Options configure a dashboard.
type Options struct {
	Inspector *inspect.Inspector
	// Gatherer is the scheduler's metrics registry (rates and lateness).
	Gatherer prometheus.Gatherer
	// ReadOnly refuses every change.
	ReadOnly bool
	// Username and Password, when set, require HTTP basic auth.
	Username, Password string
	Log                hclog.Logger
}

// CSRFHeader must be set on every POST (the page's fetch does).
const CSRFHeader = "X-Hourglass-UI"

// callTimeout bounds the inspect calls of one request.
const callTimeout = 10 * time.Second

// New returns the dashboard's handler, to be mounted at /ui/.
func New(o Options) http.Handler {
	if o.Log == nil {
		o.Log = hclog.NewNullLogger()
	}
	d := &dash{o: o, rates: newRates(o.Gatherer)}
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	mux.Handle("GET /ui/", http.StripPrefix("/ui/", http.FileServerFS(static)))
	mux.HandleFunc("GET /ui/api/config", d.config)
	mux.HandleFunc("GET /ui/api/queues", d.queues)
	mux.HandleFunc("GET /ui/api/shards", d.shards)
	mux.HandleFunc("GET /ui/api/dead", d.dead)
	mux.HandleFunc("GET /ui/api/task", d.task)
	mux.HandleFunc("GET /ui/api/stats", d.stats)
	for route, acts := range changes(o.Inspector) {
		param := strings.Trim(route[strings.IndexByte(route, '{'):], "{}")
		mux.HandleFunc("POST /ui/api/"+route+"/{action}", d.change(d.act(param, acts)))
	}
	return d.auth(mux)
}

type dash struct {
	o     Options
	rates *rates
}

// auth requires basic auth when a username is configured.
func (d *dash) auth(next http.Handler) http.Handler {
	if d.o.Username == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		uOK := subtle.ConstantTimeCompare([]byte(u), []byte(d.o.Username)) == 1
		pOK := subtle.ConstantTimeCompare([]byte(p), []byte(d.o.Password)) == 1
		if !ok || !uOK || !pOK {
			w.Header().Set("WWW-Authenticate", `Basic realm="hourglass", charset="UTF-8"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// change guards a mutating handler: read-only mode and the CSRF header.
func (d *dash) change(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		switch {
		case d.o.ReadOnly:
			writeErr(w, http.StatusForbidden, errors.New("the dashboard is read-only (http.dashboard.read_only)"))
		case r.Header.Get(CSRFHeader) != "1":
			writeErr(w, http.StatusForbidden, errors.New("missing header "+CSRFHeader))
		default:
			h(w, r)
		}
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, code int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
}

// fail answers an inspect error with its status.
func (d *dash) fail(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, inspect.ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, inspect.ErrTaskActive):
		code = http.StatusConflict
	case errors.Is(err, inspect.ErrInvalidArgument):
		code = http.StatusBadRequest
	default:
		d.o.Log.Warn("dashboard request failed", "error", err)
	}
	writeErr(w, code, err)
}
