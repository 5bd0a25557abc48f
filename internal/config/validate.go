package config

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

var (
	namespaceRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)
	replicaIDRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
	queueNameRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)

	logLevels  = []string{"trace", "debug", "info", "warn", "error"}
	logFormats = []string{"text", "json"}
)

// Limits enforced by Validate.
const (
	maxShards       = 4096
	maxPayloadLimit = 512 << 20
	minLeaseTTL     = 2 * time.Second // etcd rejects shorter leases
	maxLeaseTTL     = 60 * time.Second
	maxScanLimit    = 10000
	minRecheck      = 100 * time.Millisecond
	maxRetriesLimit = 1000
	minQueueTimeout = 100 * time.Millisecond
	maxRedisDB      = 15
)

// Validate checks every field and returns all problems joined, each a
// *[FieldError] naming its dotted key and wrapping [ErrInvalid]. It
// returns nil for a valid configuration. Load calls it; call it again
// after changing a loaded Config.
func (c *Config) Validate() error {
	var v validator
	if !namespaceRE.MatchString(c.Namespace) {
		v.add("namespace", "must match %s (got %q)", namespaceRE, c.Namespace)
	}
	v.intRange("shards", int64(c.Shards), 1, maxShards)
	v.intRange("max_payload", c.MaxPayload, 1, maxPayloadLimit)

	v.hostPort("redis.addr", c.Redis.Addr, true)
	v.intRange("redis.db", int64(c.Redis.DB), 0, maxRedisDB)
	if c.Redis.PoolSize < 0 {
		v.add("redis.pool_size", "must be 0 (the go-redis default) or more (got %d)", c.Redis.PoolSize)
	}
	v.positive("redis.dial_timeout", c.Redis.DialTimeout)
	v.tls("redis.tls", c.Redis.TLS)

	if len(c.Etcd.Endpoints) == 0 {
		v.add("etcd.endpoints", "at least one endpoint is required")
	}
	for i, e := range c.Etcd.Endpoints {
		u, err := url.Parse(e)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			v.add(fmt.Sprintf("etcd.endpoints[%d]", i), "must be an http:// or https:// URL with a host (got %q)", e)
		}
	}
	v.positive("etcd.dial_timeout", c.Etcd.DialTimeout)
	v.tls("etcd.tls", c.Etcd.TLS)

	if id := c.Scheduler.ReplicaID; id != "" && !replicaIDRE.MatchString(id) {
		v.add("scheduler.replica_id", "must be empty or match %s (got %q)", replicaIDRE, id)
	}
	v.durationRange("scheduler.lease_ttl", c.Scheduler.LeaseTTL, minLeaseTTL, maxLeaseTTL)
	if ttl := c.Scheduler.LeaseTTL; ttl%time.Second != 0 {
		// etcd lease TTLs are whole seconds; refuse rather than truncate.
		v.add("scheduler.lease_ttl", "must be a whole number of seconds (got %s)", ttl)
	}
	v.intRange("scheduler.scan_limit", int64(c.Scheduler.ScanLimit), 1, maxScanLimit)
	v.durationRange("scheduler.safety_recheck", c.Scheduler.SafetyRecheck, minRecheck, 0)

	if len(c.Queues) == 0 {
		v.add("queues", "at least one queue is required")
	}
	for _, name := range slices.Sorted(maps.Keys(c.Queues)) {
		q := c.Queues[name]
		key := "queues." + name
		if !queueNameRE.MatchString(name) {
			v.add(key, "queue name must match %s", queueNameRE)
		}
		v.intRange(key+".max_retries", int64(q.MaxRetries), 0, maxRetriesLimit)
		v.durationRange(key+".timeout", q.Timeout, minQueueTimeout, 0)
	}

	if c.HTTP.Addr != "" {
		v.hostPort("http.addr", c.HTTP.Addr, false)
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

func (v *validator) tls(prefix string, t TLSConfig) {
	if t.CertFile != "" && t.KeyFile == "" {
		v.add(prefix+".key_file", "must be set when %s.cert_file is set", prefix)
	}
	if t.KeyFile != "" && t.CertFile == "" {
		v.add(prefix+".cert_file", "must be set when %s.key_file is set", prefix)
	}
	if !t.Enabled && t != (TLSConfig{}) {
		// Settings without enabled would silently connect in plain text.
		v.add(prefix+".enabled", "must be true when other %s settings are given", prefix)
	}
}
