package config

import (
	"github.com/hourglass-sched/hourglass/internal/shard"

	"errors"
	"net/url"
	"slices"
	"strings"
	"time"
)

// ErrInvalid is wrapped by every error that reports a bad key or value:
// unknown keys, values of the wrong type and failed validation rules.
// Errors reading or parsing the file or the flags do not wrap it.
var ErrInvalid = errors.New("config: invalid")

// FieldError reports a problem with one configuration key. Its message
// has the form "config: <key>: <problem>". It matches [ErrInvalid] with
// errors.Is.
type FieldError struct {
	// Key is the full dotted key, for example "scheduler.lease_ttl" or
	// "queues.emails.timeout".
	Key string
	// Msg describes the problem.
	Msg string
}

// Error implements error.
func (e *FieldError) Error() string { return "config: " + e.Key + ": " + e.Msg }

// Unwrap returns [ErrInvalid].
func (e *FieldError) Unwrap() error { return ErrInvalid }

// redactedText replaces secrets in [Config.Redacted].
const redactedText = "[redacted]"

// Config is the complete configuration of an Hourglass binary.
type Config struct {
	// Namespace prefixes every Redis key and etcd key, so that several
	// deployments can share servers. It must match ^[A-Za-z0-9_-]{1,32}$.
	// Default "hourglass".
	Namespace string `koanf:"namespace"`
	// Shards is the number of shards the delayed tasks are spread over,
	// 1 to 4096. Default 16.
	Shards int `koanf:"shards"`
	// MaxPayload is the largest task payload accepted, in bytes, 1 to
	// 512 MiB. Default 1 MiB.
	MaxPayload int64 `koanf:"max_payload"`
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
	// HTTP configures the metrics and health endpoint.
	HTTP HTTPConfig `koanf:"http"`
	// Log configures logging.
	Log LogConfig `koanf:"log"`
}

// RedisConfig configures the connection to a standalone Redis server.
type RedisConfig struct {
	// Addr is the server's host:port. Default "127.0.0.1:6379".
	Addr string `koanf:"addr"`
	// Username is the ACL user; empty means the default user.
	Username string `koanf:"username"`
	// Password is the ACL user's password or the AUTH password. Secret.
	Password string `koanf:"password"`
	// DB is the logical database, 0 to 15. Default 0.
	DB int `koanf:"db"`
	// TLS configures TLS to the server.
	TLS TLSConfig `koanf:"tls"`
	// PoolSize is the maximum number of connections; 0 means the
	// go-redis default (10 per CPU). Default 0.
	PoolSize int `koanf:"pool_size"`
	// DialTimeout bounds establishing a connection. Default 5s.
	DialTimeout time.Duration `koanf:"dial_timeout"`
}

// EtcdConfig configures the connection to an etcd cluster.
type EtcdConfig struct {
	// Endpoints are the client URLs of the cluster members, each with
	// scheme http or https. Default ["http://127.0.0.1:2379"].
	Endpoints []string `koanf:"endpoints"`
	// Username is the etcd user; empty disables authentication.
	Username string `koanf:"username"`
	// Password is the etcd user's password. Secret.
	Password string `koanf:"password"`
	// TLS configures TLS to the cluster.
	TLS TLSConfig `koanf:"tls"`
	// DialTimeout bounds fetching an auth token and similar start-up
	// calls. Default 5s.
	DialTimeout time.Duration `koanf:"dial_timeout"`
}

// TLSConfig configures a TLS client. All fields but Enabled must be
// empty when Enabled is false.
type TLSConfig struct {
	// Enabled turns TLS on.
	Enabled bool `koanf:"enabled"`
	// CAFile is a PEM file of certificate authorities that verify the
	// server; empty means the system's roots.
	CAFile string `koanf:"ca_file"`
	// CertFile is the PEM client certificate. Set with KeyFile or not at
	// all.
	CertFile string `koanf:"cert_file"`
	// KeyFile is the PEM private key of CertFile.
	KeyFile string `koanf:"key_file"`
	// ServerName overrides the host name verified in the server's
	// certificate.
	ServerName string `koanf:"server_name"`
	// InsecureSkipVerify disables verification of the server's
	// certificate. For tests only.
	InsecureSkipVerify bool `koanf:"insecure_skip_verify"`
}

// SchedulerConfig configures the scheduler process.
type SchedulerConfig struct {
	// ReplicaID names this replica in etcd and in logs. Empty means the
	// binary picks hostname-pid at start. If set it must match
	// ^[A-Za-z0-9_.-]{1,64}$.
	ReplicaID string `koanf:"replica_id"`
	// LeaseTTL is the TTL of the etcd lease that holds this replica's
	// shards: a whole number of seconds from 2s (etcd's minimum) to 60s.
	// Default 5s.
	LeaseTTL time.Duration `koanf:"lease_ttl"`
	// ScanLimit is the largest batch of due tasks moved per script call,
	// 1 to 10000. Default 512.
	ScanLimit int `koanf:"scan_limit"`
	// SafetyRecheck is how often every owned shard is scanned even
	// without a wake-up, at least 100ms. Default 30s.
	SafetyRecheck time.Duration `koanf:"safety_recheck"`
	// RecoveryLimit is the largest batch of expired leases recovered per
	// script call, 1 to 10000. Default 512.
	RecoveryLimit int `koanf:"recovery_limit"`
	// StrandCheck is how often a shard's owner looks for tasks that a
	// worker popped from a ready list but died before leasing, at least
	// 100ms. Default 5s.
	StrandCheck time.Duration `koanf:"strand_check"`
	// IdleRecheck is how often the recovery loop of a shard with nothing
	// leased and nothing ready checks it anyway (the mover wakes it when
	// tasks become ready), at least 100ms; a value below SafetyRecheck
	// is raised to it. Default 5m.
	IdleRecheck time.Duration `koanf:"idle_recheck"`
	// FarBucket is the width of the far tier's time buckets: a task due
	// more than FarLead plus up to one bucket ahead is kept in a list per
	// bucket, at a fraction of a sorted-set member's memory, and moved
	// into the delayed set FarLead before its bucket starts. 0 turns the
	// tier off; else at least 1s. Default 1m.
	FarBucket time.Duration `koanf:"far_bucket"`
	// FarLead is how long before its bucket starts a far-tier bucket is
	// promoted into the delayed set, at least 1s. Default 15s.
	FarLead time.Duration `koanf:"far_lead"`
	// Prefetch moves tasks into ready lists up to this long before they
	// are due, whole milliseconds from 0 to 250ms; workers hold each until
	// its due time. Fewer,
	// larger mover calls and fetches cut Redis's cost per task at steady
	// rates. 0 (the default) moves tasks when due. See
	// docs/operations.md for what it changes (cancel, rate limits).
	Prefetch time.Duration `koanf:"prefetch"`
}

// WorkerConfig configures the worker process.
type WorkerConfig struct {
	// ShutdownGrace is how long running handlers may finish after a
	// shutdown signal before their tasks are released, 0 or more; 0
	// releases them at once. Default 30s.
	ShutdownGrace time.Duration `koanf:"shutdown_grace"`
	// FetchTimeout bounds one blocking fetch from the ready lists: a
	// whole number of seconds (Redis's BLMPOP timeout as go-redis sends
	// it) from 1s to 60s. An idle worker sends one command per
	// FetchTimeout. Default 2s.
	FetchTimeout time.Duration `koanf:"fetch_timeout"`
	// AckLinger is how long a successful task's acknowledgement may wait
	// for others to share its round trip to Redis, 0 to 50ms; 0 sends
	// each at once. Default 2ms.
	AckLinger time.Duration `koanf:"ack_linger"`
}

// DLQConfig bounds each shard's dead-letter queue. Entries beyond either
// bound are dropped, oldest first.
type DLQConfig struct {
	// MaxSize is the most entries kept per shard, 0 or more; 0 means
	// unbounded. Default 100000.
	MaxSize int `koanf:"max_size"`
	// MaxAge is how long an entry is kept, 0 or more; 0 means unbounded.
	// Default 168h (7 days).
	MaxAge time.Duration `koanf:"max_age"`
}

// QueueConfig configures one queue. MaxRetries, Timeout and Backoff are
// registered in Redis by the schedulers; Concurrency, HandlerTimeout,
// LeaseAfter, HTTP and Command are read by the worker binary only.
type QueueConfig struct {
	// MaxRetries is how often a failed task is retried, 0 to 1000.
	// Default 25.
	MaxRetries int `koanf:"max_retries"`
	// Timeout is the lease (visibility timeout) of one processing attempt
	// and the default timeout of a task enqueued without one, at least
	// 100ms. Default 30s.
	Timeout time.Duration `koanf:"timeout"`
	// Backoff is the delay before each retry.
	Backoff BackoffConfig `koanf:"backoff"`
	// Concurrency is the most tasks of this queue one worker process
	// runs at once, 1 to 10000. Default 10.
	Concurrency int `koanf:"concurrency"`
	// HandlerTimeout bounds one handler run in the worker, 0 or more; 0
	// means no bound beyond the lease. Default 60s.
	HandlerTimeout time.Duration `koanf:"handler_timeout"`
	// LeaseAfter is how long a handler runs on a popped task before the
	// worker leases it, 0 to 500ms: a handler done sooner costs no lease
	// at all (see worker.QueueOptions.LeaseAfter); 0 leases every task
	// before its handler starts. Default 100ms.
	LeaseAfter time.Duration `koanf:"lease_after"`
	// MaxConcurrency caps the handlers of this queue running at once
	// across every worker process, 0 to 100000; 0 means no cluster-wide
	// cap. Default 0.
	MaxConcurrency int `koanf:"max_concurrency"`
	// RateLimit caps dispatches of this queue across every worker process.
	RateLimit RateLimitConfig `koanf:"rate_limit"`
	// HTTP delivers the queue's tasks to an HTTP endpoint. Set HTTP.URL
	// or Command, not both; with neither the worker binary does not
	// consume the queue.
	HTTP HTTPTarget `koanf:"http"`
	// Command delivers the queue's tasks to a program: argv, run without
	// a shell. If set, Command[0] must not be empty.
	Command []string `koanf:"command"`
}

// RateLimitConfig is a cluster-wide token bucket (GCRA): Rate dispatches
// per Period, bursts of up to Burst.
type RateLimitConfig struct {
	// Rate is the number of dispatches per Period, 0 to 1000000; 0 means
	// no rate limit. Default 0.
	Rate int `koanf:"rate"`
	// Period is the rate's period, at least 1ms. Default 1s.
	Period time.Duration `koanf:"period"`
	// Burst is the most dispatches admitted at once, 1 to 1000000.
	// Default 1.
	Burst int `koanf:"burst"`
}

// BackoffConfig is an exponential retry delay: failed attempt n waits
// about min(Cap, Base*Factor^(n-1)).
type BackoffConfig struct {
	// Base is the first delay, at least 1ms. Default 1s.
	Base time.Duration `koanf:"base"`
	// Cap is the longest delay, at least Base. Default 1h.
	Cap time.Duration `koanf:"cap"`
	// Factor multiplies the delay after each attempt, 1 to 100.
	// Default 2.
	Factor float64 `koanf:"factor"`
}

// HTTPTarget is the HTTP endpoint that a queue's tasks are delivered to
// (see internal/executor).
type HTTPTarget struct {
	// URL is the http:// or https:// URL requested for each task; empty
	// means the queue has no HTTP target. A password in it is secret.
	URL string `koanf:"url"`
	// Headers are added to every request. Their values are secret (they
	// usually carry credentials). May only be set together with URL.
	Headers map[string]string `koanf:"headers"`
	// Method is POST or PUT. Default "POST".
	Method string `koanf:"method"`
}

// HTTPConfig configures the binary's HTTP endpoint (metrics, health).
type HTTPConfig struct {
	// Addr is the host:port to listen on; empty disables the endpoint.
	// Default "127.0.0.1:9464".
	Addr string `koanf:"addr"`
}

// LogConfig configures logging.
type LogConfig struct {
	// Level is one of trace, debug, info, warn, error. Default "info".
	Level string `koanf:"level"`
	// Format is text or json. Default "text".
	Format string `koanf:"format"`
}

// DefaultQueue returns the settings a queue starts from before its
// configured values are applied.
func DefaultQueue() QueueConfig {
	return QueueConfig{
		MaxRetries:     25,
		Timeout:        30 * time.Second,
		Backoff:        BackoffConfig{Base: time.Second, Cap: time.Hour, Factor: 2},
		Concurrency:    10,
		HandlerTimeout: 60 * time.Second,
		LeaseAfter:     100 * time.Millisecond,
		RateLimit:      RateLimitConfig{Period: time.Second, Burst: 1},
		HTTP:           HTTPTarget{Method: "POST"},
	}
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
// default queue only when no layer names any queue.
func defaultsWithoutQueues() Config {
	return Config{
		Namespace:  shard.DefaultNamespace,
		Shards:     shard.DefaultShards,
		MaxPayload: 1 << 20,
		Redis: RedisConfig{
			Addr:        "127.0.0.1:6379",
			DialTimeout: 5 * time.Second,
		},
		Etcd: EtcdConfig{
			Endpoints:   []string{"http://127.0.0.1:2379"},
			DialTimeout: 5 * time.Second,
		},
		Scheduler: SchedulerConfig{
			LeaseTTL:      5 * time.Second,
			ScanLimit:     512,
			SafetyRecheck: 30 * time.Second,
			RecoveryLimit: 512,
			StrandCheck:   5 * time.Second,
			IdleRecheck:   5 * time.Minute,
			FarBucket:     time.Minute,
			FarLead:       15 * time.Second,
		},
		Worker: WorkerConfig{
			ShutdownGrace: 30 * time.Second,
			FetchTimeout:  2 * time.Second,
			AckLinger:     2 * time.Millisecond,
		},
		DLQ: DLQConfig{
			MaxSize: 100000,
			MaxAge:  168 * time.Hour,
		},
		HTTP: HTTPConfig{Addr: "127.0.0.1:9464"},
		Log:  LogConfig{Level: "info", Format: "text"},
	}
}

// Redacted returns a deep copy of c in which every secret is replaced by
// "[redacted]", for logging the effective configuration: every non-empty
// password, the password in a queue's http.url and the value of every
// queue's http.headers.
func (c Config) Redacted() Config {
	c.Etcd.Endpoints = slices.Clone(c.Etcd.Endpoints)
	redact(&c.Redis.Password)
	redact(&c.Etcd.Password)
	if c.Queues != nil {
		qs := make(map[string]QueueConfig, len(c.Queues))
		for name, q := range c.Queues {
			q.Command = slices.Clone(q.Command)
			q.HTTP.URL = redactURL(q.HTTP.URL)
			if q.HTTP.Headers != nil {
				h := make(map[string]string, len(q.HTTP.Headers))
				for k := range q.HTTP.Headers {
					h[k] = redactedText
				}
				q.HTTP.Headers = h
			}
			qs[name] = q
		}
		c.Queues = qs
	}
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
