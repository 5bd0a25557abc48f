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
	maxRecoveryLim  = 10000
	minStrandCheck  = 100 * time.Millisecond
	minFetchTimeout = time.Second
	maxFetchTimeout = 60 * time.Second
	maxAckLinger    = 50 * time.Millisecond  // worker.MaxAckLinger
	maxPrefetch     = 250 * time.Millisecond // shard.MaxPrefetch
	minBackoffBase  = time.Millisecond
	maxBackoffMult  = 100
	maxConcurrency  = 10000
	maxLeaseAfter   = 500 * time.Millisecond // worker.MaxLeaseAfter
)

var httpMethods = []string{"POST", "PUT"}

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
	v.intRange("scheduler.recovery_limit", int64(c.Scheduler.RecoveryLimit), 1, maxRecoveryLim)
	v.durationRange("scheduler.strand_check", c.Scheduler.StrandCheck, minStrandCheck, 0)
	v.durationRange("scheduler.idle_recheck", c.Scheduler.IdleRecheck, minRecheck, 0)
	minFarLead := time.Duration(0) // far_bucket 0: the far tier is off, far_lead unused
	if c.Scheduler.FarBucket != 0 {
		v.durationRange("scheduler.far_bucket", c.Scheduler.FarBucket, time.Second, 0)
		minFarLead = time.Second
	}
	v.durationRange("scheduler.far_lead", c.Scheduler.FarLead, minFarLead, 0)
	v.durationRange("scheduler.prefetch", c.Scheduler.Prefetch, 0, maxPrefetch)
	if p := c.Scheduler.Prefetch; p%time.Millisecond != 0 {
		// Due times are whole milliseconds; refuse rather than truncate.
		v.add("scheduler.prefetch", "must be a whole number of milliseconds (got %s)", p)
	}

	v.durationRange("worker.shutdown_grace", c.Worker.ShutdownGrace, 0, 0)
	v.durationRange("worker.fetch_timeout", c.Worker.FetchTimeout, minFetchTimeout, maxFetchTimeout)
	v.durationRange("worker.ack_linger", c.Worker.AckLinger, 0, maxAckLinger)
	if ft := c.Worker.FetchTimeout; ft%time.Second != 0 {
		// go-redis sends BLMPOP's timeout in whole seconds; refuse rather
		// than truncate.
		v.add("worker.fetch_timeout", "must be a whole number of seconds (got %s)", ft)
	}

	if c.DLQ.MaxSize < 0 {
		v.add("dlq.max_size", "must be 0 (unbounded) or more (got %d)", c.DLQ.MaxSize)
	}
	if c.DLQ.MaxAge < 0 {
		v.add("dlq.max_age", "must be 0 (unbounded) or more (got %s)", c.DLQ.MaxAge)
	}

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
		v.backoff(key+".backoff", q.Backoff)
		v.intRange(key+".concurrency", int64(q.Concurrency), 1, maxConcurrency)
		v.durationRange(key+".handler_timeout", q.HandlerTimeout, 0, 0)
		v.durationRange(key+".lease_after", q.LeaseAfter, 0, maxLeaseAfter)
		v.intRange(key+".max_concurrency", int64(q.MaxConcurrency), 0, 100000)
		v.intRange(key+".rate_limit.rate", int64(q.RateLimit.Rate), 0, 1000000)
		v.durationRange(key+".rate_limit.period", q.RateLimit.Period, time.Millisecond, 0)
		v.intRange(key+".rate_limit.burst", int64(q.RateLimit.Burst), 1, 1000000)
		v.target(key, q)
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

func (v *validator) backoff(prefix string, b BackoffConfig) {
	v.durationRange(prefix+".base", b.Base, minBackoffBase, 0)
	if b.Cap < b.Base {
		v.add(prefix+".cap", "must be at least %s.base (%s) (got %s)", prefix, b.Base, b.Cap)
	}
	// The negated test also catches NaN.
	if !(b.Factor >= 1 && b.Factor <= maxBackoffMult) {
		v.add(prefix+".factor", "must be between 1 and %d (got %g)", maxBackoffMult, b.Factor)
	}
}

// target checks a queue's delivery target: http or command, not both.
func (v *validator) target(key string, q QueueConfig) {
	h := q.HTTP
	if h.URL != "" && len(q.Command) > 0 {
		v.add(key, "set either http.url or command, not both")
	}
	if h.URL != "" {
		u, err := url.Parse(h.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			// The URL is not quoted: it may hold a password.
			v.add(key+".http.url", "must be an http:// or https:// URL with a host")
		}
	}
	if len(h.Headers) > 0 && h.URL == "" {
		v.add(key+".http.headers", "must only be set together with %s.http.url", key)
	}
	for _, name := range slices.Sorted(maps.Keys(h.Headers)) {
		if !validHeaderName(name) {
			v.add(key+".http.headers", "%q is not a valid header name", name)
		} else if strings.ContainsAny(h.Headers[name], "\r\n\x00") {
			// The value is not shown: it is a secret.
			v.add(key+".http.headers", "the value of %q contains a line break or NUL", name)
		}
	}
	if !slices.Contains(httpMethods, h.Method) {
		v.add(key+".http.method", "must be one of %s (got %q)", strings.Join(httpMethods, ", "), h.Method)
	}
	if len(q.Command) > 0 && q.Command[0] == "" {
		v.add(key+".command", "the program (the first element) must not be empty")
	}
}

// validHeaderName reports whether s is an HTTP field name: a non-empty
// token (RFC 9110, section 5.6.2).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case strings.ContainsRune("!#$%&'*+-.^_`|~", r):
		default:
			return false
		}
	}
	return true
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
