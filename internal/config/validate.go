package config

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hourglass-sched/hourglass/internal/confcheck"
	"github.com/hourglass-sched/hourglass/worker"
)

var (
	logLevels  = []string{"trace", "debug", "info", "warn", "error"}
	logFormats = []string{"text", "json"}
)

// Validate checks every field and returns all problems joined, each a
// *[FieldError] naming its dotted key and wrapping [ErrInvalid]. It
// returns nil for a valid configuration. Load calls it; call it again
// after changing a loaded Config.
//
// The rules are [Settings]': a key owned by a library is checked by that
// library's Validate, whose problem is reported under the key; the
// ranges of the other keys are checked from their row; what depends on
// other keys (a Redis mode's addresses, TLS files, a queue's target) is
// checked in the section's file. The TLS files of an enabled section are
// read and parsed (LoadTLS), so a missing or bad file is a problem of
// its key. At most one problem is reported per key.
func (c *Config) Validate() error {
	v := validator{seen: map[string]bool{}}
	v.ranges(c)
	v.redis(c.Redis)
	v.etcd(c.Etcd)
	v.scheduler(c.Scheduler)
	v.queues(c.Queues)
	v.periodic(c)
	v.tracing(c.Worker.Tracing)
	if c.HTTP.Addr != "" {
		v.hostPort("http.addr", c.HTTP.Addr, false)
	}
	if d := c.HTTP.Dashboard; (d.Username == "") != (d.Password == "") {
		v.add("http.dashboard.password", "username and password must be set together (basic auth)")
	}
	for i, h := range c.HTTP.Dashboard.AllowedHosts {
		if h == "" || strings.ContainsAny(h, ":/ ") {
			v.add(fmt.Sprintf("http.dashboard.allowed_hosts[%d]", i), "must be a host name without scheme or port (got %q)", h)
		}
	}
	v.libraries(c)
	return errors.Join(v.errs...)
}

type validator struct {
	errs []error
	seen map[string]bool // keys with a problem reported
}

func (v *validator) add(key, format string, args ...any) {
	v.seen[key] = true
	v.errs = append(v.errs, &FieldError{Key: key, Msg: fmt.Sprintf(format, args...)})
}

// ranges checks the range, unit and allowed values of every key that no
// library owns, from its row in Settings.
func (v *validator) ranges(c *Config) {
	root := reflect.ValueOf(c).Elem()
	for _, s := range settings {
		if len(s.Lib) > 0 || s.Custom {
			continue
		}
		if rest, ok := strings.CutPrefix(s.Key, "queues.<q>."); ok {
			for _, name := range slices.Sorted(maps.Keys(c.Queues)) {
				q := c.Queues[name]
				v.checkRange(s, "queues."+name+"."+rest, fieldAt(reflect.ValueOf(&q).Elem(), rest))
			}
			continue
		}
		v.checkRange(s, s.Key, fieldAt(root, s.Key))
	}
}

// checkRange checks f, the value of key, against s's Min, Max, Unit and
// Allowed. A zero is valid when s says what it means.
func (v *validator) checkRange(s Setting, key string, f reflect.Value) {
	if !f.IsValid() || (f.IsZero() && s.Zero != "") {
		return
	}
	switch {
	case f.Type() == durationType:
		d := time.Duration(f.Int())
		lo, hasLo := s.Min.(time.Duration)
		hi, hasHi := s.Max.(time.Duration)
		switch {
		case hasLo && lo == 1 && d < lo:
			v.add(key, "must be positive (got %s)", d)
		case hasLo && d < lo:
			v.add(key, "must be at least %s (got %s)", lo, d)
		case hasHi && d > hi:
			v.add(key, "must be at most %s (got %s)", hi, d)
		case s.Unit != 0 && d%s.Unit != 0:
			v.add(key, "must be a whole number of %s (got %s)", confcheck.UnitName(s.Unit), d)
		}
	case f.CanInt():
		n := f.Int()
		lo, hasLo := asInt(s.Min)
		hi, hasHi := asInt(s.Max)
		switch {
		case hasLo && hasHi && (n < lo || n > hi):
			v.add(key, "must be between %d and %d (got %d)", lo, hi, n)
		case hasLo && n < lo:
			v.add(key, "must be at least %d (got %d)", lo, n)
		case hasHi && n > hi:
			v.add(key, "must be at most %d (got %d)", hi, n)
		}
	case f.CanFloat():
		x := f.Float()
		lo, hasLo := s.Min.(float64)
		hi, hasHi := s.Max.(float64)
		// The negated tests also catch NaN.
		if hasLo && hasHi && !(x >= lo && x <= hi) {
			v.add(key, "must be between %g and %g (got %g)", lo, hi, x)
		}
	case f.Kind() == reflect.String && s.Allowed != nil:
		if !slices.Contains(s.Allowed, f.String()) {
			v.add(key, "must be one of %s (got %q)", strings.Join(s.Allowed, ", "), f.String())
		}
	}
}

func asInt(x any) (int64, bool) {
	if x == nil {
		return 0, false
	}
	r := reflect.ValueOf(x)
	if !r.CanInt() || r.Type() == durationType {
		return 0, false
	}
	return r.Int(), true
}

// libraries runs the Validate of every library the configuration sets up
// and reports each problem under the key of its field: the library's
// rule is the only one, the configuration adds the key name. A key that
// already has a problem is not reported twice.
func (v *validator) libraries(c *Config) {
	v.library("scan", "", c.ForMover().Validate())
	v.library("recovery", "", c.ForRecovery().Validate())
	v.library("reshard", "", c.ForReshard().Validate())
	v.library("fire", "", c.ForFire().Validate())
	replica := c.Scheduler.ReplicaID
	if replica == "" {
		replica = "hostname-pid" // chosen by the binary at start, always valid
	}
	v.library("election", "", c.ForElection(replica).Validate())
	v.library("worker.Config", "", c.ForWorker().Validate())
	for _, name := range slices.Sorted(maps.Keys(c.Queues)) {
		o := c.Queues[name].ForWorker()
		// The backoff is the queue's policy, checked as shard's above;
		// the worker would only repeat it.
		o.Backoff = worker.Backoff{}
		v.library("worker.QueueOptions", name, o.Validate())
	}
}

// library reports err's problems, those of lib's Config; queue names the
// queue of a worker.QueueOptions.
func (v *validator) library(lib, queue string, err error) {
	confcheck.Each(err, func(e error) {
		var fe *confcheck.FieldError
		if !errors.As(e, &fe) {
			v.add(libSection(lib, queue), "%v", e)
			return
		}
		key, ok := libKeys[lib+"."+fe.Field]
		if !ok {
			key = libSection(lib, queue)
		}
		key = strings.Replace(key, "<q>", queue, 1)
		if !v.seen[key] {
			v.add(key, "%s", fe.Msg)
		}
	})
}

// libSection is where a problem of lib that no key names is reported.
func libSection(lib, queue string) string {
	switch lib {
	case "worker.Config":
		return "worker"
	case "worker.QueueOptions":
		return "queues." + queue
	}
	return "scheduler"
}

// libKeys maps each library field of Setting.Lib to its key.
var libKeys = func() map[string]string {
	m := map[string]string{}
	for _, s := range settings {
		for _, l := range s.Lib {
			m[l] = s.Key
		}
	}
	return m
}()

// fieldAt returns the field of the struct v at a dotted path of koanf
// names; the zero Value if there is none.
func fieldAt(v reflect.Value, path string) reflect.Value {
	for p := range strings.SplitSeq(path, ".") {
		if v.Kind() != reflect.Struct {
			return reflect.Value{}
		}
		f, ok := fieldByTag(v.Type(), p)
		if !ok {
			return reflect.Value{}
		}
		v = v.FieldByIndex(f.Index)
	}
	return v
}

// ApplyDefaults replaces the zero of every key whose zero means its
// default with the default, as Load does: for a Config built in code
// (package scheduler).
func (c *Config) ApplyDefaults() {
	def := Default()
	c.fillDefaults(&def)
}

// fillDefaults replaces the zero of every key whose zero means its
// default (ZeroDefault) with the default: def's value, or DefaultQueue's
// for a queue's keys. Load calls it after validation, so that the Config
// a binary gets holds the values it runs with.
func (c *Config) fillDefaults(def *Config) {
	root, droot := reflect.ValueOf(c).Elem(), reflect.ValueOf(def).Elem()
	dq := DefaultQueue()
	for _, s := range settings {
		if s.Zero != ZeroDefault || s.Default != "" {
			continue
		}
		if rest, ok := strings.CutPrefix(s.Key, "queues.<q>."); ok {
			for name, q := range c.Queues {
				if f := fieldAt(reflect.ValueOf(&q).Elem(), rest); f.IsZero() {
					f.Set(fieldAt(reflect.ValueOf(&dq).Elem(), rest))
					c.Queues[name] = q
				}
			}
			continue
		}
		if f := fieldAt(root, s.Key); f.IsValid() && f.IsZero() {
			f.Set(fieldAt(droot, s.Key))
		}
	}
}

// hostPort checks a host:port address with a numeric port. A dialled
// address (needHost) needs a host and a non-zero port; a listen address
// may leave the host empty for all interfaces and use port 0.
func (v *validator) hostPort(key, addr string, needHost bool) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		v.add(key, "must be host:port (got %q)", addr)
		return
	}
	if needHost && host == "" {
		v.add(key, "must name a host (got %q)", addr)
	}
	lo := 0
	if needHost {
		lo = 1
	}
	if p, err := strconv.Atoi(port); err != nil || p < lo || p > 65535 {
		v.add(key, "must have a port number from %d to 65535 (got %q)", lo, addr)
	}
}

// tracing checks the worker.tracing keys that depend on the exporter.
func (v *validator) tracing(t TracingConfig) {
	switch {
	case t.Exporter == "file" && t.File == "":
		v.add("worker.tracing.file", "must be set with exporter file")
	case t.Exporter != "file" && t.File != "":
		v.add("worker.tracing.file", "is for exporter file (exporter is %q)", t.Exporter)
	}
	if t.Endpoint == "" {
		return
	}
	if t.Exporter != "otlp" {
		v.add("worker.tracing.endpoint", "is for exporter otlp (exporter is %q)", t.Exporter)
		return
	}
	if u, err := url.Parse(t.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		v.add("worker.tracing.endpoint", "must be an http or https URL (got %q)", t.Endpoint)
	}
}
