package config

import (
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/worker"
)

// QueueConfig configures one queue. MaxRetries, Timeout, Backoff,
// Retention and Fair are registered in Redis by the schedulers; Concurrency, HandlerTimeout,
// LeaseAfter, HTTP and Command are read by the worker binary only.
type QueueConfig struct {
	// MaxRetries is how often a failed task is retried.
	MaxRetries int `koanf:"max_retries"`
	// Timeout is the lease (visibility timeout) of one processing attempt
	// and the default timeout of a task enqueued without one.
	Timeout time.Duration `koanf:"timeout"`
	// Backoff is the delay before each retry.
	Backoff BackoffConfig `koanf:"backoff"`
	// Retention is how long the records of the queue's ended tasks
	// (succeeded with the handler's result, cancelled) are kept; 0 keeps
	// none. RetentionCount bounds them per shard.
	Retention      time.Duration `koanf:"retention"`
	RetentionCount int           `koanf:"retention_count"`
	// Fair takes the queue's due tasks in turns between their keys (the
	// hash tag of a task's id; docs/fairness.md) instead of in due order;
	// FairWindow is the most entries of its ready list per shard.
	Fair       bool `koanf:"fair"`
	FairWindow int  `koanf:"fair_window"`
	// KeyConcurrency caps the tasks of each key of a fair queue that run
	// (or wait in its window) at once, across every worker process.
	KeyConcurrency int `koanf:"key_concurrency"`
	// KeyRateLimit limits the tasks of each key of a fair queue that
	// enter its window, by a token bucket per key.
	KeyRateLimit KeyRateConfig `koanf:"key_rate_limit"`
	// Concurrency is the most tasks of this queue one worker process
	// runs at once.
	Concurrency int `koanf:"concurrency"`
	// HandlerTimeout bounds one handler run in the worker.
	HandlerTimeout time.Duration `koanf:"handler_timeout"`
	// LeaseAfter is how long a handler runs on a popped task before the
	// worker leases it: a handler done sooner costs no lease at all (see
	// worker.QueueOptions.LeaseAfter).
	LeaseAfter time.Duration `koanf:"lease_after"`
	// MaxConcurrency caps the handlers of this queue running at once
	// across every worker process.
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

// RateLimitConfig is a cluster-wide rate limit: Rate dispatches per
// Period, held by the limiter Kind names (worker.LimiterKind; by default
// a GCRA token bucket with bursts of up to Burst).
type RateLimitConfig struct {
	// Rate is the number of dispatches per Period.
	Rate int `koanf:"rate"`
	// Period is the rate's period.
	Period time.Duration `koanf:"period"`
	// Burst is the most dispatches admitted at once (token_bucket), or
	// the most admitted ahead of their turn (leaky_bucket).
	Burst int `koanf:"burst"`
	// Kind is the limiter: token_bucket, sliding_window, fixed_window or
	// leaky_bucket.
	Kind string `koanf:"kind"`
}

// KeyRateConfig is a rate per key of a fair queue: Rate tasks of a key
// per Period, held by the limiter Kind names (shard.KeyRate; by default
// a token bucket with bursts of up to Burst).
type KeyRateConfig struct {
	Rate   int           `koanf:"rate"`
	Period time.Duration `koanf:"period"`
	Burst  int           `koanf:"burst"`
	Kind   string        `koanf:"kind"`
}

// BackoffConfig is an exponential retry delay: failed attempt n waits
// about min(Cap, Base*Factor^(n-1)).
type BackoffConfig struct {
	// Base is the first delay.
	Base time.Duration `koanf:"base"`
	// Cap is the longest delay.
	Cap time.Duration `koanf:"cap"`
	// Factor multiplies the delay after each attempt.
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
	// Method is the requests' method.
	Method string `koanf:"method"`
}

// DefaultQueue returns the settings a queue starts from before its
// configured values are applied: the libraries' defaults (shard's for the
// policy the schedulers register, worker's for consuming).
func DefaultQueue() QueueConfig {
	b := shard.DefaultBackoff
	return QueueConfig{
		MaxRetries:     shard.DefaultMaxRetries,
		Timeout:        shard.DefaultTimeout,
		Backoff:        BackoffConfig{Base: b.Base, Cap: b.Cap, Factor: b.Factor},
		Concurrency:    worker.DefaultConcurrency,
		HandlerTimeout: worker.DefaultHandlerTimeout,
		LeaseAfter:     worker.DefaultLeaseAfter,
		RetentionCount: shard.DefaultRetentionCount,
		FairWindow:     shard.DefaultFairWindow,
		RateLimit:      RateLimitConfig{Period: worker.DefaultRatePeriod, Burst: worker.DefaultBurst, Kind: string(worker.TokenBucket)},
		KeyRateLimit:   KeyRateConfig{Period: time.Second, Burst: 1, Kind: shard.LimiterTokenBucket},
		HTTP:           HTTPTarget{Method: "POST"},
	}
}

func (v *validator) queues(queues map[string]QueueConfig) {
	if len(queues) == 0 {
		v.add("queues", "at least one queue is required")
	}
	for _, name := range slices.Sorted(maps.Keys(queues)) {
		v.queue("queues."+name, name, queues[name])
	}
}

// queue checks what Settings' rows do not: the queue's name, its
// backoff's cap against its base and a cap per key without fair (the
// ranges are the rows').
func (v *validator) queue(key, name string, q QueueConfig) {
	if !shard.ValidQueue(name) {
		v.add(key, "queue name must match %s", shard.QueueRule)
	}
	if q.KeyConcurrency > 0 && !q.Fair {
		v.add(key+".key_concurrency", "caps the keys of a fair queue: set %s.fair too", key)
	}
	if q.KeyRateLimit.Rate > 0 && !q.Fair {
		v.add(key+".key_rate_limit.rate", "limits the keys of a fair queue: set %s.fair too", key)
	}
	if r := q.KeyRateLimit; r.Rate > 0 && (r.Kind == "" || slices.Contains(shard.LimiterKinds, r.Kind)) {
		// The kind's rules (the ranges and the kinds are the rows').
		if field, why := shard.LimiterProblem(r.Kind, r.Rate, r.Period, r.Burst); field != "" {
			v.add(key+".key_rate_limit."+strings.ToLower(field), "%s", why)
		} else if r.Kind == shard.LimiterLeakyBucket && r.Burst > 1 {
			v.add(key+".key_rate_limit.burst", "%d: a key's leaky bucket spaces its tasks evenly (0 or 1)", r.Burst)
		}
	}
	if b := q.Backoff; b.Cap < b.Base {
		v.add(key+".backoff.cap", "must be at least %s.backoff.base (%s) (got %s)", key, b.Base, b.Cap)
	}
	v.target(key, q)
}

// keyRate is r as the shard registers it.
func keyRate(r KeyRateConfig) shard.KeyRate {
	return shard.KeyRate{Rate: r.Rate, Period: r.Period, Burst: r.Burst, Kind: r.Kind}
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

// QueuePolicies returns the policy of every queue as the schedulers
// register it in Redis.
func (c *Config) QueuePolicies() map[string]shard.QueuePolicy {
	out := make(map[string]shard.QueuePolicy, len(c.Queues))
	for name, q := range c.Queues {
		p := shard.QueuePolicy{
			MaxRetries: q.MaxRetries, Timeout: q.Timeout, MaxPayload: c.MaxPayload,
			Backoff:   shard.Backoff{Base: q.Backoff.Base, Cap: q.Backoff.Cap, Factor: q.Backoff.Factor},
			Retention: shard.Retention{Age: q.Retention, Count: q.RetentionCount},
		}
		if q.Fair {
			p.FairWindow, p.KeyConcurrency = q.FairWindow, q.KeyConcurrency
			if r := q.KeyRateLimit; r.Rate > 0 {
				p.KeyRate = keyRate(r)
			}
		}
		out[name] = p
	}
	return out
}

// ForWorker returns the worker library's options for consuming the
// queue. A key's 0 means what the library's zero field means:
// handler_timeout 0 is worker.NoTimeout, lease_after 0 worker.LeaseFirst.
func (q QueueConfig) ForWorker() worker.QueueOptions {
	return worker.QueueOptions{
		Concurrency:    q.Concurrency,
		HandlerTimeout: q.HandlerTimeout,
		LeaseAfter:     q.LeaseAfter,
		MaxConcurrency: q.MaxConcurrency,
		Rate:           q.RateLimit.Rate,
		RatePeriod:     q.RateLimit.Period,
		Burst:          q.RateLimit.Burst,
		Limiter:        worker.LimiterKind(q.RateLimit.Kind),
		Backoff:        worker.Backoff{Base: q.Backoff.Base, Cap: q.Backoff.Cap, Factor: q.Backoff.Factor},
	}
}
