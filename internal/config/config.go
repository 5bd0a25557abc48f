package config

import (
	"errors"
	"maps"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/hourglass-sched/hourglass/internal/recovery"
	"github.com/hourglass-sched/hourglass/internal/shard"
)

// ErrInvalid is wrapped by every error that reports a bad key or value:
// unknown keys, values of the wrong type and failed validation rules.
// Errors reading or parsing the file or the flags do not wrap it.
var ErrInvalid = errors.New("config: invalid")

// ErrVersion is what [Load] returns for -version: the binary prints its
// version (internal/version) and exits 0.
var ErrVersion = errors.New("config: -version")

// FieldError reports a problem with one configuration key. Its message
// has the form "config: <key>: <problem>". It matches [ErrInvalid] with
// errors.Is.
type FieldError struct {
	// Key is the full dotted key, for example "scheduler.lease_ttl" or
	// "queues.emails.timeout".
	Key string
	// Msg describes the problem.
	Msg string
	// Err is the error behind Msg, if any (reading a file the key names:
	// os.ErrNotExist for a missing one).
	Err error
}

// Error implements error.
func (e *FieldError) Error() string { return "config: " + e.Key + ": " + e.Msg }

// Unwrap returns [ErrInvalid], and Err when set.
func (e *FieldError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrInvalid}
	}
	return []error{ErrInvalid, e.Err}
}

// redactedText replaces secrets in [Config.Redacted].
const redactedText = "[redacted]"

// Config is the complete configuration of an Hourglass binary.
//
// A field's comment says what its key does; the key's range, unit,
// default and what its zero means are its row in [Settings], stated
// there once (docs/operations.md's settings tables are generated from
// them).
type Config struct {
	// Namespace prefixes every Redis key and etcd key, so that several
	// deployments can share servers.
	Namespace string `koanf:"namespace"`
	// Shards is the number of shards the delayed tasks are spread over.
	Shards int `koanf:"shards"`
	// MaxPayload is the largest task payload accepted, in bytes.
	MaxPayload int64 `koanf:"max_payload"`
	// LayoutRefresh is how often a process re-reads the layout record
	// (the shard count, docs/resharding.md) besides the announcements on
	// the control channel.
	LayoutRefresh time.Duration `koanf:"layout_refresh"`
	// Redis configures the Redis connection.
	Redis RedisConfig `koanf:"redis"`
	// Etcd configures the etcd connection.
	Etcd EtcdConfig `koanf:"etcd"`
	// Scheduler configures the scheduler process.
	Scheduler SchedulerConfig `koanf:"scheduler"`
	// Worker configures the worker process.
	Worker WorkerConfig `koanf:"worker"`
	// DLQ bounds the dead-letter queue of every shard.
	DLQ DLQConfig `koanf:"dlq"`
	// Queues holds the settings of each queue by name. Names must match
	// ^[A-Za-z0-9_.:-]{1,128}$ and at least one queue is required.
	// Default: one queue named "default" with [DefaultQueue] settings.
	Queues map[string]QueueConfig `koanf:"queues"`
	// Periodic declares the periodic schedules by name (the schedulers
	// fire them; package periodic). Default: none.
	Periodic map[string]PeriodicConfig `koanf:"periodic"`
	// HTTP configures the metrics and health endpoint.
	HTTP HTTPConfig `koanf:"http"`
	// Log configures logging.
	Log LogConfig `koanf:"log"`
}

// DLQConfig bounds each shard's dead-letter queue. Entries beyond either
// bound are dropped, oldest first.
type DLQConfig struct {
	// MaxSize is the most entries kept per shard.
	MaxSize int `koanf:"max_size"`
	// MaxAge is how long an entry is kept.
	MaxAge time.Duration `koanf:"max_age"`
}

// HTTPConfig configures the binary's HTTP endpoint (metrics, health).
type HTTPConfig struct {
	// Addr is the host:port to listen on; the worker binary's default is
	// [WorkerHTTPAddr].
	Addr string `koanf:"addr"`
	// Dashboard configures the scheduler's web dashboard on Addr (the
	// worker has none).
	Dashboard DashboardConfig `koanf:"dashboard"`
}

// DashboardConfig configures the scheduler's web dashboard (/ui/).
type DashboardConfig struct {
	// Enabled serves the dashboard.
	Enabled bool `koanf:"enabled"`
	// ReadOnly refuses every change (pause, resume, replay, purge,
	// cancel) and hides its buttons.
	ReadOnly bool `koanf:"read_only"`
	// Username and Password, when set (both or neither), protect the
	// dashboard with HTTP basic auth (the endpoint binds loopback by
	// default).
	Username string `koanf:"username"`
	Password string `koanf:"password"`
	// AllowedHosts are host names (no port) the dashboard answers under
	// besides IP addresses and localhost, for example a proxy's name.
	// Requests naming another host are refused: a DNS-rebinding page
	// reaches a loopback dashboard under its own name.
	AllowedHosts []string `koanf:"allowed_hosts"`
}

// ExposesWritableDashboard reports whether anyone who reaches Addr can
// change things through the dashboard: it is on, writable and without
// basic auth, and Addr is not a loopback address ("localhost",
// 127.0.0.0/8, ::1). An empty host or an unspecified address (0.0.0.0,
// ::) listens on every interface; a host name other than localhost is
// counted as exposed, as it cannot be told otherwise without resolving
// it. The scheduler warns at start when it is true; deploy/'s tests keep
// the shipped manifests from it.
func (h HTTPConfig) ExposesWritableDashboard() bool {
	d := h.Dashboard
	if h.Addr == "" || !d.Enabled || d.ReadOnly || d.Username != "" {
		return false
	}
	host, _, err := net.SplitHostPort(h.Addr)
	if err != nil {
		host = h.Addr
	}
	if strings.EqualFold(host, "localhost") {
		return false
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip == nil || !ip.IsLoopback()
}

// LogConfig configures logging.
type LogConfig struct {
	// Level is the least level logged.
	Level string `koanf:"level"`
	// Format is the format of every line.
	Format string `koanf:"format"`
}

// WorkerHTTPAddr is the worker binary's default http.addr, next to the
// scheduler's 127.0.0.1:9464 so that both can run on one host.
const WorkerHTTPAddr = "127.0.0.1:9465"

// WorkerDefaults changes c from the scheduler's defaults to the worker
// binary's: http.addr is [WorkerHTTPAddr]. Pass it to [Load] with
// [WithDefaults].
func WorkerDefaults(c *Config) {
	c.HTTP.Addr = WorkerHTTPAddr
}

// Default returns the built-in configuration: the lowest layer of
// [Load], and valid on its own.
func Default() Config {
	c := defaultsWithoutQueues()
	c.Queues = map[string]QueueConfig{"default": DefaultQueue()}
	return c
}

// defaultsWithoutQueues is Default with a nil Queues map; Load adds the
// default queue only when no layer names any queue. Each section's
// defaults are stated next to its keys, from the libraries' constants.
func defaultsWithoutQueues() Config {
	return Config{
		Namespace:     shard.DefaultNamespace,
		Shards:        shard.DefaultShards,
		MaxPayload:    shard.DefaultMaxPayload,
		LayoutRefresh: shard.DefaultLayoutRefresh,
		Redis:         defaultRedis(),
		Etcd:          defaultEtcd(),
		Scheduler:     defaultScheduler(),
		Worker:        defaultWorker(),
		DLQ:           DLQConfig{MaxSize: recovery.DefaultDeadMaxSize, MaxAge: recovery.DefaultDeadMaxAge},
		HTTP:          HTTPConfig{Addr: "127.0.0.1:9464", Dashboard: DashboardConfig{Enabled: true, AllowedHosts: []string{}}},
		Log:           LogConfig{Level: "info", Format: "text"},
	}
}

// Redacted returns a deep copy of c in which every secret is replaced by
// "[redacted]", for logging the effective configuration: every non-empty
// password, the password in a queue's http.url and the value of every
// queue's http.headers.
func (c Config) Redacted() Config {
	c = c.Clone()
	redact(&c.Redis.Password)
	redact(&c.Redis.SentinelPassword)
	redact(&c.Etcd.Password)
	redact(&c.HTTP.Dashboard.Password)
	for name, q := range c.Queues {
		q.HTTP.URL = redactURL(q.HTTP.URL)
		for k := range q.HTTP.Headers {
			q.HTTP.Headers[k] = redactedText
		}
		c.Queues[name] = q
	}
	return c
}

// Clone returns a deep copy of c: a replica built from it shares no map
// or slice with the caller (package scheduler).
func (c Config) Clone() Config {
	c.Etcd.Endpoints = slices.Clone(c.Etcd.Endpoints)
	c.Redis.Addrs = slices.Clone(c.Redis.Addrs)
	c.HTTP.Dashboard.AllowedHosts = slices.Clone(c.HTTP.Dashboard.AllowedHosts)
	if c.Queues != nil {
		qs := make(map[string]QueueConfig, len(c.Queues))
		for name, q := range c.Queues {
			q.Command = slices.Clone(q.Command)
			q.HTTP.Headers = maps.Clone(q.HTTP.Headers)
			qs[name] = q
		}
		c.Queues = qs
	}
	c.Periodic = maps.Clone(c.Periodic)
	return c
}

// redactURL replaces the password of a URL's userinfo. A URL that does
// not parse is redacted whole if it might hold userinfo.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		if strings.Contains(s, "@") {
			return redactedText
		}
		return s
	}
	if _, ok := u.User.Password(); !ok {
		return s
	}
	u.User = url.UserPassword(u.User.Username(), redactedText)
	// String escapes the brackets; show the marker as elsewhere.
	return strings.Replace(u.String(), url.PathEscape(redactedText), redactedText, 1)
}

func redact(s *string) {
	if *s != "" {
		*s = redactedText
	}
}
