package config

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hourglass-sched/hourglass/internal/shard"
)

var (
	logLevels  = []string{"trace", "debug", "info", "warn", "error"}
	logFormats = []string{"text", "json"}
)

// Validate checks every field and returns all problems joined, each a
// *[FieldError] naming its dotted key and wrapping [ErrInvalid]. It
// returns nil for a valid configuration. Load calls it; call it again
// after changing a loaded Config.
func (c *Config) Validate() error {
	var v validator
	if !shard.ValidNamespace(c.Namespace) {
		v.add("namespace", "must match %s (got %q)", shard.NamespaceRule, c.Namespace)
	}
	v.intRange("shards", int64(c.Shards), 1, shard.MaxShards)
	v.intRange("max_payload", c.MaxPayload, 1, shard.MaxPayloadLimit)
	v.durationRange("layout_refresh", c.LayoutRefresh, shard.MinLayoutRefresh, 0)
	v.redis(c.Redis)
	v.etcd(c.Etcd)
	v.scheduler(c.Scheduler)
	v.worker(c.Worker)
	if c.DLQ.MaxSize < 0 {
		v.add("dlq.max_size", "must be 0 (unbounded) or more (got %d)", c.DLQ.MaxSize)
	}
	if c.DLQ.MaxAge < 0 {
		v.add("dlq.max_age", "must be 0 (unbounded) or more (got %s)", c.DLQ.MaxAge)
	}
	v.queues(c.Queues)
	v.periodic(c)
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
	if !slices.Contains(logLevels, c.Log.Level) {
		v.add("log.level", "must be one of %s (got %q)", strings.Join(logLevels, ", "), c.Log.Level)
	}
	if !slices.Contains(logFormats, c.Log.Format) {
		v.add("log.format", "must be one of %s (got %q)", strings.Join(logFormats, ", "), c.Log.Format)
	}
	return errors.Join(v.errs...)
}

type validator struct{ errs []error }

func (v *validator) add(key, format string, args ...any) {
	v.errs = append(v.errs, &FieldError{Key: key, Msg: fmt.Sprintf(format, args...)})
}

func (v *validator) intRange(key string, n, lo, hi int64) {
	if n < lo || n > hi {
		v.add(key, "must be between %d and %d (got %d)", lo, hi, n)
	}
}

func (v *validator) positive(key string, d time.Duration) {
	if d <= 0 {
		v.add(key, "must be positive (got %s)", d)
	}
}

// durationRange checks lo <= d and, if hi > 0, d <= hi.
func (v *validator) durationRange(key string, d, lo, hi time.Duration) {
	switch {
	case d < lo:
		v.add(key, "must be at least %s (got %s)", lo, d)
	case hi > 0 && d > hi:
		v.add(key, "must be at most %s (got %s)", hi, d)
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
