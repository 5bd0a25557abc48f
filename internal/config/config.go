package config

import (
	"errors"
	"maps"
	"slices"
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
}

// QueueConfig configures one queue.
type QueueConfig struct {
	// MaxRetries is how often a failed task is retried, 0 to 1000.
	// Default 25.
	MaxRetries int `koanf:"max_retries"`
	// Timeout bounds one processing attempt, at least 100ms. Default 30s.
	Timeout time.Duration `koanf:"timeout"`
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
	return QueueConfig{MaxRetries: 25, Timeout: 30 * time.Second}
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
		Namespace:  "hourglass",
		Shards:     16,
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
		},
		HTTP: HTTPConfig{Addr: "127.0.0.1:9464"},
		Log:  LogConfig{Level: "info", Format: "text"},
	}
}

// Redacted returns a deep copy of c in which every non-empty password is
// replaced by "[redacted]", for logging the effective configuration.
func (c Config) Redacted() Config {
	c.Etcd.Endpoints = slices.Clone(c.Etcd.Endpoints)
	c.Queues = maps.Clone(c.Queues)
	redact(&c.Redis.Password)
	redact(&c.Etcd.Password)
	return c
}

func redact(s *string) {
	if *s != "" {
		*s = redactedText
	}
}
