// Package dashboard is the scheduler's web dashboard: a page (embedded
// assets, nothing fetched from the internet) and a JSON API under /ui/,
// both faces of the public inspect package. It shows queues with their
// depths and state, periodic schedules, the replica's move rate and
// lateness, the shard layout (and the progress of a change of the shard
// count) with the shards' owners, dead letters and task lookup, and a
// page per queue charting its history (uPlot, embedded); it
// offers pause, resume (of queues and schedules), replay, purge and
// cancel unless it is read-only. It does not change the shard count (the
// CLI's shards resize does).
//
// Protection, in the order a request meets it: security headers on every
// answer (a strict CSP; no page may frame the dashboard); the Host header
// must be an IP address, localhost or an allowed host name (a
// DNS-rebinding page reaches a loopback server under its own name);
// optional basic auth, whose failures are logged (without the
// credentials) and, repeated, refused for a while per client
// (throttle.go); changes need POST with the header X-Hourglass-UI, an
// Origin (when the client sends one) that is the dashboard's own host or
// an allowed one, and, from a browser that says, a same-origin
// Sec-Fetch-Site (a cross-site form or fetch can send neither header), and
// are refused in read-only mode. Every change, and every refused one, is
// logged. The scheduler's HTTP address binds loopback by default, and the
// scheduler warns at start when a writable dashboard without auth listens
// on any other address.
package dashboard

import (
	"maps"

	"context"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hourglass-sched/hourglass"
	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/periodic"
)

//go:embed assets
var assets embed.FS

// Options configure a dashboard.
type Options struct {
	Inspector *inspect.Inspector
	// Gatherer is the scheduler's metrics registry (move figures).
	Gatherer prometheus.Gatherer
	// ReadOnly refuses every change.
	ReadOnly bool
	// Username and Password, when set, require HTTP basic auth.
	Username, Password string
	// AllowedHosts are host names (no port) the dashboard answers under
	// besides IP addresses and localhost, for example the name of a
	// proxy in front of it.
	AllowedHosts []string
	// Schedules returns the periodic schedules to show, those the
	// scheduler fires now (configured and registered at run time); nil
	// shows none. It is called once per request and its result is not
	// changed. Only these schedules can be paused.
	Schedules func() []*periodic.Compiled
	// BulkPart bounds one request of a bulk action on dead letters
	// (Replay all, Purge all): a set too large for it is done in part,
	// the answer says "more", and the page sends the request again.
	// 0 means DefaultBulkPart.
	BulkPart time.Duration
	Log      hclog.Logger
}

// CSRFHeader must be set to "1" on every POST (the page's fetch does).
const CSRFHeader = "X-Hourglass-UI"

const (
	// callTimeout bounds the inspect calls of one request.
	callTimeout = 10 * time.Second
	// ownersTimeout bounds the shard table's read, etcd's owners
	// included: an unreachable etcd costs a refresh this long, not
	// callTimeout.
	ownersTimeout = 3 * time.Second
	// nextOccurrences is how many next occurrences of each schedule
	// GET schedules computes (the page shows the first).
	nextOccurrences = 3
)

// New returns the dashboard's handler, to be mounted at /ui/.
func New(o Options) http.Handler {
	if o.Log == nil {
		o.Log = hclog.NewNullLogger()
	}
	d := &dash{o: o, fails: newFailures()}
	in := o.Inspector
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	mux.Handle("GET /ui/", http.StripPrefix("/ui/", http.FileServerFS(static)))
	notFound := func(w http.ResponseWriter, _ *http.Request) {
		writeErr(w, http.StatusNotFound, errors.New("no such API route"))
	}
	mux.HandleFunc("GET /ui/api/", notFound)
	mux.HandleFunc("POST /ui/api/", notFound)
	mux.HandleFunc("GET /ui/api/config", d.config)
	mux.HandleFunc("GET /ui/api/queues", d.queues)
	mux.HandleFunc("GET /ui/api/schedules", d.schedules)
	mux.HandleFunc("GET /ui/api/shards", d.shards)
	mux.HandleFunc("GET /ui/api/processes", d.processes)
	mux.HandleFunc("GET /ui/api/dead", d.dead)
	mux.HandleFunc("GET /ui/api/task", d.task)
	mux.HandleFunc("GET /ui/api/recent", d.recent)
	mux.HandleFunc("GET /ui/api/schedulehistory", d.scheduleHistory)
	mux.HandleFunc("GET /ui/api/history", d.history)
	mux.HandleFunc("GET /ui/api/stats", d.stats)
	for path, do := range map[string]func(context.Context, string) error{
		"queues/{target}/pause":  in.Pause,
		"queues/{target}/resume": in.Resume,
		// Clear takes any name, as the CLI's: a removed queue's limits
		// can be cleared.
		"queues/{target}/unlimit": in.ClearQueueLimits,
		// Resume, as the CLI's, takes any name: it clears the pause of a
		// schedule no longer fired.
		"schedules/{target}/pause":  d.pauseSchedule,
		"schedules/{target}/resume": in.ResumeSchedule,
		"dead/{target}/replay":      func(ctx context.Context, id string) error { return in.Replay(ctx, id, time.Time{}) },
		"dead/{target}/purge":       in.Purge,
		"tasks/{target}/cancel":     func(ctx context.Context, id string) error { _, err := in.Cancel(ctx, id); return err },
	} {
		mux.HandleFunc("POST /ui/api/"+path, d.change(func(ctx context.Context, _ *http.Request, target string) error { return do(ctx, target) }))
	}
	mux.HandleFunc("GET /ui/api/weights", d.weights)
	mux.HandleFunc("POST /ui/api/queues/{target}/weight", d.change(d.weight))
	mux.HandleFunc("POST /ui/api/queues/{target}/keycap", d.change(d.keycap))
	mux.HandleFunc("POST /ui/api/queues/{target}/keyrate", d.change(d.keyrate))
	mux.HandleFunc("POST /ui/api/tasks/{target}/reschedule", d.change(d.reschedule))
	mux.HandleFunc("POST /ui/api/tasks/{target}/replace", d.change(d.replace))
	mux.HandleFunc("POST /ui/api/deadall/{target}", d.changeWith(d.deadAll))
	return securityHeaders(d.hostCheck(d.auth(mux)))
}

// ContentSecurityPolicy is the policy of every /ui/ response. The page
// loads only its own embedded script and style (no inline script or
// style, no eval), talks only to its own API, and may be framed by no
// page at all (frame-ancestors, with X-Frame-Options for older
// browsers): a page of another origin cannot put the dashboard under a
// click of its own (clickjacking).
const ContentSecurityPolicy = "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'; object-src 'none'"

// securityHeaders sets, on every response under /ui/ (the page, its
// assets, the API, errors and refusals alike): the CSP above,
// X-Frame-Options DENY, nosniff (a JSON answer is never run as script or
// style), no Referer on the page's requests, and same-origin resource
// policy (another origin cannot load an answer as an image or script).
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}

type dash struct {
	o     Options
	fails *failures // basic-auth failures per client
	procs procCache // the processes' last listing
}

// hostCheck refuses a Host that is neither an IP address, localhost nor
// an allowed name.
func (d *dash) hostCheck(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.Trim(host, "[]")
		ok := net.ParseIP(host) != nil || strings.EqualFold(host, "localhost") ||
			slices.ContainsFunc(d.o.AllowedHosts, func(a string) bool { return strings.EqualFold(a, host) })
		if !ok {
			d.o.Log.Warn("dashboard request refused: host not allowed", "host", r.Host, "remote", r.RemoteAddr)
			writeErr(w, http.StatusForbidden, errors.New("host "+r.Host+" is not allowed: add it to http.dashboard.allowed_hosts"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// auth requires basic auth when a username is configured. The
// credentials are compared as SHA-256 sums, in constant time and without
// revealing their lengths. A request without credentials is challenged
// (401, as a browser's first one is); wrong credentials are a failure,
// logged with the client's address and never with what it sent, and a
// client with too many failures in a row is refused (429 with
// Retry-After, its credentials not checked) for a while (throttle.go).
func (d *dash) auth(next http.Handler) http.Handler {
	if d.o.Username == "" {
		return next
	}
	wantU, wantP := sha256.Sum256([]byte(d.o.Username)), sha256.Sum256([]byte(d.o.Password))
	challenge := func(w http.ResponseWriter) {
		w.Header().Set("WWW-Authenticate", `Basic realm="hourglass", charset="UTF-8"`)
		writeErr(w, http.StatusUnauthorized, errors.New("authentication required"))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := client(r.RemoteAddr)
		if wait := d.fails.locked(c); wait > 0 {
			secs := int((wait + time.Second - 1) / time.Second)
			w.Header().Set("Retry-After", strconv.Itoa(secs))
			writeErr(w, http.StatusTooManyRequests, fmt.Errorf("too many failed logins from this address: try again in %d s", secs))
			return
		}
		u, p, ok := r.BasicAuth()
		if !ok {
			challenge(w)
			return
		}
		gotU, gotP := sha256.Sum256([]byte(u)), sha256.Sum256([]byte(p))
		uOK := subtle.ConstantTimeCompare(gotU[:], wantU[:]) == 1
		pOK := subtle.ConstantTimeCompare(gotP[:], wantP[:]) == 1
		if !uOK || !pOK {
			n, lock := d.fails.fail(c)
			if lock > 0 {
				d.o.Log.Warn("dashboard auth failed: wrong username or password; refusing this client for a while",
					"remote", r.RemoteAddr, "path", r.URL.Path, "failures", n, "refused_for", lock)
			} else {
				d.o.Log.Warn("dashboard auth failed: wrong username or password", "remote", r.RemoteAddr, "path", r.URL.Path, "failures", n)
			}
			challenge(w)
			return
		}
		d.fails.succeed(c)
		next.ServeHTTP(w, r)
	})
}

// sameOrigin reports whether a change's Origin header, when it has one,
// names the dashboard's own host (the request's Host) or an allowed
// host. A client that sends no Origin (curl, a script) passes: the
// X-Hourglass-UI header it must send is what a page of another origin
// cannot. "null" (a sandboxed frame, a file) does not pass.
func (d *dash) sameOrigin(r *http.Request) (bool, string) {
	o := r.Header.Get("Origin")
	if o == "" {
		return true, ""
	}
	u, err := url.Parse(o)
	if err != nil || u.Host == "" {
		return false, o
	}
	if strings.EqualFold(u.Host, r.Host) ||
		slices.ContainsFunc(d.o.AllowedHosts, func(a string) bool { return strings.EqualFold(a, u.Hostname()) }) {
		return true, o
	}
	return false, o
}

// change serves a change of the target named by the path: refused in
// read-only mode, without the CSRF header, or from another site; logged
// either way.
func (d *dash) change(do func(ctx context.Context, r *http.Request, target string) error) http.HandlerFunc {
	return d.changeWith(func(ctx context.Context, r *http.Request, target string) (map[string]any, error) {
		return nil, do(ctx, r, target)
	})
}

// changeWith is change for an action whose answer carries more: the
// fields do returns with a nil error are added to it (a bulk action's
// counts).
func (d *dash) changeWith(do func(ctx context.Context, r *http.Request, target string) (map[string]any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		target := r.PathValue("target")
		action := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
		var refused error
		switch site := r.Header.Get("Sec-Fetch-Site"); {
		case d.o.ReadOnly:
			refused = errors.New("the dashboard is read-only (http.dashboard.read_only)")
		case r.Header.Get(CSRFHeader) != "1":
			refused = errors.New("missing header " + CSRFHeader + ": 1")
		case site != "" && site != "same-origin":
			refused = errors.New("cross-site request (Sec-Fetch-Site: " + site + ")")
		default:
			if ok, origin := d.sameOrigin(r); !ok {
				refused = fmt.Errorf("cross-origin request (Origin %q is neither this host %q nor in http.dashboard.allowed_hosts)", origin, r.Host)
			}
		}
		if refused != nil {
			d.o.Log.Warn("dashboard change refused", "action", action, "target", target, "remote", r.RemoteAddr, "reason", refused)
			writeErr(w, http.StatusForbidden, refused)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
		defer cancel()
		more, err := do(ctx, r, target)
		if err != nil {
			d.fail(w, err)
			return
		}
		d.o.Log.Info("dashboard change", "action", action, "target", target, "remote", r.RemoteAddr)
		answer := map[string]any{"action": action, "target": target}
		maps.Copy(answer, more)
		writeJSON(w, answer)
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, code int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
}

// fail answers an inspect error with its status: 504 for a call that
// timed out, whether its ctx ended (context.DeadlineExceeded) or the
// connection's read or write deadline passed first (a net.Error whose
// Timeout is true: go-redis's "i/o timeout").
func (d *dash) fail(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, inspect.ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, inspect.ErrActive), errors.Is(err, inspect.ErrDead):
		code = http.StatusConflict
	case errors.Is(err, hourglass.ErrPayloadTooLarge):
		code = http.StatusRequestEntityTooLarge
	case errors.Is(err, inspect.ErrInvalidArgument):
		code = http.StatusBadRequest
	case errors.Is(err, context.Canceled):
		return // the client went away (or the scheduler is stopping)
	case errors.Is(err, context.DeadlineExceeded), isTimeout(err):
		code = http.StatusGatewayTimeout
		d.o.Log.Warn("dashboard request timed out", "error", err)
	default:
		d.o.Log.Warn("dashboard request failed", "error", err)
	}
	writeErr(w, code, err)
}

// isTimeout reports whether err is a network timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
