package config_test

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/config"
	"github.com/hourglass-sched/hourglass/internal/scan"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/worker"
)

// Tests of the worker, dlq and recovery keys and of the queues' backoff,
// concurrency, handler_timeout, http and command settings.

func TestNewKeyDefaults(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, nil, nil)
	q := c.Queues["default"]
	checks := []struct {
		name      string
		got, want any
	}{
		{"scheduler.recovery_limit", c.Scheduler.RecoveryLimit, 512},
		{"scheduler.strand_check", c.Scheduler.StrandCheck, 5 * time.Second},
		{"scheduler.idle_recheck", c.Scheduler.IdleRecheck, 5 * time.Minute},
		{"scheduler.far_bucket", c.Scheduler.FarBucket, time.Minute},
		{"scheduler.far_lead", c.Scheduler.FarLead, 15 * time.Second},
		{"scheduler.prefetch", c.Scheduler.Prefetch, scan.DefaultPrefetch},
		{"worker.shutdown_grace", c.Worker.ShutdownGrace, 30 * time.Second},
		{"worker.fetch_timeout", c.Worker.FetchTimeout, 30 * time.Second},
		{"worker.ack_linger", c.Worker.AckLinger, worker.DefaultAckLinger},
		{"dlq.max_size", c.DLQ.MaxSize, 100000},
		{"dlq.max_age", c.DLQ.MaxAge, 168 * time.Hour},
		{"queues.default.backoff.base", q.Backoff.Base, time.Second},
		{"queues.default.backoff.cap", q.Backoff.Cap, time.Hour},
		{"queues.default.backoff.factor", q.Backoff.Factor, 2.0},
		{"queues.default.concurrency", q.Concurrency, 10},
		{"queues.default.handler_timeout", q.HandlerTimeout, 60 * time.Second},
		{"queues.default.lease_after", q.LeaseAfter, worker.DefaultLeaseAfter},
		{"queues.default.http.url", q.HTTP.URL, ""},
		{"queues.default.http.headers", len(q.HTTP.Headers), 0},
		{"queues.default.http.method", q.HTTP.Method, "POST"},
		{"queues.default.command", len(q.Command), 0},
	}
	for _, ch := range checks {
		if !reflect.DeepEqual(ch.got, ch.want) {
			t.Errorf("%s = %v, want %v", ch.name, ch.got, ch.want)
		}
	}
	// A queue named only for one setting still gets every other default.
	c = mustLoad(t, []string{"-set", "queues.q.max_retries=1"}, nil)
	if got, want := c.Queues["q"], queue(1, 30*time.Second); !reflect.DeepEqual(got, want) {
		t.Errorf("queue q = %+v, want %+v", got, want)
	}
}

// The file forms are covered by TestLoadFile; these are the environment
// and -set forms, including keys nested below a queue.
func TestNewKeyOverrides(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		args, env []string
		check     func(*config.Config) bool
	}{
		{"scheduler keys from env", nil,
			[]string{"HOURGLASS_SCHEDULER__RECOVERY_LIMIT=10000", "HOURGLASS_SCHEDULER__STRAND_CHECK=100ms"},
			func(c *config.Config) bool {
				return c.Scheduler.RecoveryLimit == 10000 && c.Scheduler.StrandCheck == 100*time.Millisecond
			}},
		{"worker keys from -set", []string{"-set", "worker.shutdown_grace=0s", "-set", "worker.fetch_timeout=60s"}, nil,
			func(c *config.Config) bool {
				return c.Worker.ShutdownGrace == 0 && c.Worker.FetchTimeout == time.Minute
			}},
		{"dlq unbounded from env", nil, []string{"HOURGLASS_DLQ__MAX_SIZE=0", "HOURGLASS_DLQ__MAX_AGE=0s"},
			func(c *config.Config) bool { return c.DLQ.MaxSize == 0 && c.DLQ.MaxAge == 0 }},
		{"backoff from env", nil,
			[]string{"HOURGLASS_QUEUES__Q__BACKOFF__BASE=1ms", "HOURGLASS_QUEUES__Q__BACKOFF__FACTOR=1.25"},
			func(c *config.Config) bool {
				b := c.Queues["q"].Backoff
				return b == config.BackoffConfig{Base: time.Millisecond, Cap: time.Hour, Factor: 1.25}
			}},
		{"backoff of a dotted queue from -set", []string{"-set", "queues.mail.high.backoff.cap=5m", "-set", "queues.mail.high.backoff.factor=1"}, nil,
			func(c *config.Config) bool {
				b := c.Queues["mail.high"].Backoff
				return len(c.Queues) == 1 && b == config.BackoffConfig{Base: time.Second, Cap: 5 * time.Minute, Factor: 1}
			}},
		{"worker-side queue keys from -set", []string{"-set", "queues.q.concurrency=10000", "-set", "queues.q.handler_timeout=0s"}, nil,
			func(c *config.Config) bool {
				return c.Queues["q"].Concurrency == 10000 && c.Queues["q"].HandlerTimeout == 0
			}},
		{"http target from -set", []string{
			"-set", "queues.hooks.http.url=http://127.0.0.1:8080/hook",
			"-set", "queues.hooks.http.method=PUT",
			"-set", "queues.hooks.http.headers.X-Api-Key=k=v",
		}, nil,
			func(c *config.Config) bool {
				h := c.Queues["hooks"].HTTP
				return len(c.Queues) == 1 && h.URL == "http://127.0.0.1:8080/hook" && h.Method == "PUT" &&
					reflect.DeepEqual(h.Headers, map[string]string{"X-Api-Key": "k=v"})
			}},
		{"dotted queue and header names from -set", []string{
			"-set", "queues.a.http.url=https://h/",
			"-set", "queues.a.http.headers.x.y=1",
			"-set", "queues.a.b.http.url=https://h2/",
		}, nil,
			func(c *config.Config) bool {
				return c.Queues["a"].HTTP.Headers["X.y"] == "1" && c.Queues["a.b"].HTTP.URL == "https://h2/"
			}},
		{"header from env, name canonicalized", nil, []string{
			"HOURGLASS_QUEUES__HOOKS__HTTP__URL=https://h/",
			"HOURGLASS_QUEUES__HOOKS__HTTP__HEADERS__AUTHORIZATION=Bearer abc",
		},
			func(c *config.Config) bool {
				return reflect.DeepEqual(c.Queues["hooks"].HTTP.Headers, map[string]string{"Authorization": "Bearer abc"})
			}},
		{"command from env, comma-separated", nil, []string{"HOURGLASS_QUEUES__JOBS__COMMAND=/bin/job,--verbose"},
			func(c *config.Config) bool {
				return reflect.DeepEqual(c.Queues["jobs"].Command, []string{"/bin/job", "--verbose"})
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if c := mustLoad(t, tt.args, tt.env); !tt.check(c) {
				t.Errorf("unexpected config %+v", c)
			}
		})
	}
}

// Headers merge over the layers; a later layer overrides a header however
// it spells the name.
func TestLoadHeadersMerge(t *testing.T) {
	t.Parallel()
	path := writeYAML(t, `
queues:
  hooks:
    http:
      url: https://h/
      headers:
        Authorization: from-file
        X-Keep: kept
`)
	c := mustLoad(t, []string{"-config", path, "-set", "queues.hooks.http.headers.x-added=added"},
		[]string{"HOURGLASS_QUEUES__HOOKS__HTTP__HEADERS__AUTHORIZATION=from-env"})
	want := map[string]string{"Authorization": "from-env", "X-Keep": "kept", "X-Added": "added"}
	if got := c.Queues["hooks"].HTTP.Headers; !reflect.DeepEqual(got, want) {
		t.Errorf("headers = %v, want %v", got, want)
	}
}

func TestValidateNewKeys(t *testing.T) {
	t.Parallel()
	withQueue := func(f func(q *config.QueueConfig)) func(*config.Config) {
		return func(c *config.Config) {
			q := c.Queues["default"]
			f(&q)
			c.Queues["default"] = q
		}
	}
	tests := []validateCase{
		{"scheduler.recovery_limit min", func(c *config.Config) { c.Scheduler.RecoveryLimit = 1 }, ""},
		{"scheduler.recovery_limit zero: the default", func(c *config.Config) { c.Scheduler.RecoveryLimit = 0 }, ""},
		{"scheduler.recovery_limit negative", func(c *config.Config) { c.Scheduler.RecoveryLimit = -1 },
			"config: scheduler.recovery_limit: must be between 1 and 10000 (got -1)"},
		{"scheduler.recovery_limit big", func(c *config.Config) { c.Scheduler.RecoveryLimit = 10001 }, "config: scheduler.recovery_limit:"},
		{"scheduler.strand_check min", func(c *config.Config) { c.Scheduler.StrandCheck = 100 * time.Millisecond }, ""},
		{"scheduler.strand_check short", func(c *config.Config) { c.Scheduler.StrandCheck = 99 * time.Millisecond },
			"config: scheduler.strand_check: must be at least 100ms"},
		{"scheduler.idle_recheck short", func(c *config.Config) { c.Scheduler.IdleRecheck = 99 * time.Millisecond },
			"config: scheduler.idle_recheck: must be at least 100ms"},
		{"scheduler.far_bucket off", func(c *config.Config) { c.Scheduler.FarBucket = 0 }, ""},
		{"scheduler.far_bucket short", func(c *config.Config) { c.Scheduler.FarBucket = 999 * time.Millisecond },
			"config: scheduler.far_bucket: must be at least 1s"},
		{"scheduler.far_lead short", func(c *config.Config) { c.Scheduler.FarLead = 0 },
			"config: scheduler.far_lead: must be at least 1s"},
		{"scheduler.far_lead unused with the tier off", func(c *config.Config) { c.Scheduler.FarBucket, c.Scheduler.FarLead = 0, 0 }, ""},
		{"scheduler.far_lead negative with the tier off", func(c *config.Config) { c.Scheduler.FarBucket, c.Scheduler.FarLead = 0, -time.Second },
			"config: scheduler.far_lead: must be at least 0s"},
		{"scheduler.prefetch max", func(c *config.Config) { c.Scheduler.Prefetch = shard.MaxPrefetch }, ""},
		{"scheduler.prefetch too long", func(c *config.Config) { c.Scheduler.Prefetch = shard.MaxPrefetch + time.Millisecond },
			"config: scheduler.prefetch: must be at most 250ms"},
		{"scheduler.prefetch fraction", func(c *config.Config) { c.Scheduler.Prefetch = 1500 * time.Microsecond },
			"config: scheduler.prefetch: must be a whole number of milliseconds (got 1.5ms)"},
		{"scheduler.prefetch negative", func(c *config.Config) { c.Scheduler.Prefetch = -time.Millisecond },
			"config: scheduler.prefetch: must be at least 0s"},

		{"worker.shutdown_grace zero", func(c *config.Config) { c.Worker.ShutdownGrace = 0 }, ""},
		{"worker.shutdown_grace negative", func(c *config.Config) { c.Worker.ShutdownGrace = -time.Second },
			"config: worker.shutdown_grace: must be at least 0s"},
		{"worker.fetch_timeout bounds", func(c *config.Config) { c.Worker.FetchTimeout = time.Second }, ""},
		{"worker.fetch_timeout zero: the default", func(c *config.Config) { c.Worker.FetchTimeout = 0 }, ""},
		{"worker.fetch_timeout short", func(c *config.Config) { c.Worker.FetchTimeout = -time.Second }, "config: worker.fetch_timeout: must be at least 1s"},
		{"worker.fetch_timeout long", func(c *config.Config) { c.Worker.FetchTimeout = 61 * time.Second },
			"config: worker.fetch_timeout: must be at most 1m0s"},
		{"worker.ack_linger off", func(c *config.Config) { c.Worker.AckLinger = 0 }, ""},
		{"worker.ack_linger bound", func(c *config.Config) { c.Worker.AckLinger = worker.MaxAckLinger }, ""},
		{"worker.ack_linger long", func(c *config.Config) { c.Worker.AckLinger = worker.MaxAckLinger + time.Millisecond },
			"config: worker.ack_linger: must be at most 50ms"},
		{"worker.ack_linger negative", func(c *config.Config) { c.Worker.AckLinger = -time.Millisecond },
			"config: worker.ack_linger: must be at least 0s"},
		{"worker.fetch_timeout fraction", func(c *config.Config) { c.Worker.FetchTimeout = 1500 * time.Millisecond },
			"config: worker.fetch_timeout: must be a whole number of seconds"},

		{"dlq unbounded", func(c *config.Config) { c.DLQ = config.DLQConfig{} }, ""},
		{"dlq.max_size negative", func(c *config.Config) { c.DLQ.MaxSize = -1 }, "config: dlq.max_size: must be at least 0 (got -1)"},
		{"dlq.max_age negative", func(c *config.Config) { c.DLQ.MaxAge = -time.Hour }, "config: dlq.max_age: must be at least 0s (got -1h0m0s)"},

		{"backoff flat", withQueue(func(q *config.QueueConfig) {
			q.Backoff = config.BackoffConfig{Base: time.Millisecond, Cap: time.Millisecond, Factor: 1}
		}), ""},
		{"backoff.base short", withQueue(func(q *config.QueueConfig) { q.Backoff.Base = time.Microsecond }),
			"config: queues.default.backoff.base: must be at least 1ms"},
		{"backoff.cap below base", withQueue(func(q *config.QueueConfig) { q.Backoff.Cap = 500 * time.Millisecond }),
			"config: queues.default.backoff.cap: must be at least queues.default.backoff.base (1s)"},
		{"backoff.factor below 1", withQueue(func(q *config.QueueConfig) { q.Backoff.Factor = 0.5 }),
			"config: queues.default.backoff.factor: must be between 1 and 100 (got 0.5)"},
		{"backoff.factor above 100", withQueue(func(q *config.QueueConfig) { q.Backoff.Factor = 100.5 }),
			"config: queues.default.backoff.factor:"},
		{"backoff.factor NaN", withQueue(func(q *config.QueueConfig) { q.Backoff.Factor = math.NaN() }),
			"config: queues.default.backoff.factor:"},
		{"key_concurrency of a fair queue", withQueue(func(q *config.QueueConfig) { q.Fair, q.KeyConcurrency = true, 3 }), ""},
		{"key_concurrency without fair", withQueue(func(q *config.QueueConfig) { q.KeyConcurrency = 3 }),
			"config: queues.default.key_concurrency: caps the keys of a fair queue: set queues.default.fair too"},
		{"key_concurrency negative", withQueue(func(q *config.QueueConfig) { q.Fair, q.KeyConcurrency = true, -1 }),
			"config: queues.default.key_concurrency: must be between 0 and 10000 (got -1)"},
		{"key_rate_limit by a sliding window", withQueue(func(q *config.QueueConfig) {
			q.Fair, q.KeyRateLimit = true, config.KeyRateConfig{Rate: 5, Period: time.Second, Burst: 1, Kind: "sliding_window"}
		}), ""},
		{"key_rate_limit of an unknown kind", withQueue(func(q *config.QueueConfig) {
			q.Fair, q.KeyRateLimit = true, config.KeyRateConfig{Rate: 5, Period: time.Second, Burst: 1, Kind: "bucket"}
		}), "config: queues.default.key_rate_limit.kind: must be one of"},
		{"key_rate_limit of a leaky bucket with a burst", withQueue(func(q *config.QueueConfig) {
			q.Fair, q.KeyRateLimit = true, config.KeyRateConfig{Rate: 5, Period: time.Second, Burst: 3, Kind: "leaky_bucket"}
		}), "config: queues.default.key_rate_limit.burst: 3: a key's leaky bucket spaces its tasks evenly (0 or 1)"},
		{"key_rate_limit of a window with a burst", withQueue(func(q *config.QueueConfig) {
			q.Fair, q.KeyRateLimit = true, config.KeyRateConfig{Rate: 5, Period: time.Second, Burst: 2, Kind: "fixed_window"}
		}), "config: queues.default.key_rate_limit.burst: 2 has no meaning for a fixed_window"},

		{"concurrency max", withQueue(func(q *config.QueueConfig) { q.Concurrency = 10000 }), ""},
		{"concurrency zero: the default", withQueue(func(q *config.QueueConfig) { q.Concurrency = 0 }), ""},
		{"concurrency negative", withQueue(func(q *config.QueueConfig) { q.Concurrency = -1 }),
			"config: queues.default.concurrency: must be between 1 and 10000 (got -1)"},
		{"concurrency big", withQueue(func(q *config.QueueConfig) { q.Concurrency = 10001 }), "config: queues.default.concurrency:"},
		{"handler_timeout none", withQueue(func(q *config.QueueConfig) { q.HandlerTimeout = 0 }), ""},
		{"lease_after off", withQueue(func(q *config.QueueConfig) { q.LeaseAfter = 0 }), ""},
		{"lease_after max", withQueue(func(q *config.QueueConfig) { q.LeaseAfter = worker.MaxLeaseAfter }), ""},
		{"lease_after too long", withQueue(func(q *config.QueueConfig) { q.LeaseAfter = worker.MaxLeaseAfter + time.Millisecond }),
			"config: queues.default.lease_after: must be at most 500ms"},
		{"handler_timeout negative", withQueue(func(q *config.QueueConfig) { q.HandlerTimeout = -time.Second }),
			"config: queues.default.handler_timeout: must be at least 0s"},

		{"http target", withQueue(func(q *config.QueueConfig) {
			q.HTTP = config.HTTPTarget{URL: "https://u:p@h:8443/p?q=1", Method: "PUT", Headers: map[string]string{"Authorization": "Bearer x"}}
		}), ""},
		{"http.url no scheme", withQueue(func(q *config.QueueConfig) { q.HTTP.URL = "h:80/x" }),
			"config: queues.default.http.url: must be an http:// or https:// URL"},
		{"http.url other scheme", withQueue(func(q *config.QueueConfig) { q.HTTP.URL = "ftp://h/x" }), "config: queues.default.http.url:"},
		{"http.url no host", withQueue(func(q *config.QueueConfig) { q.HTTP.URL = "http:///x" }), "config: queues.default.http.url:"},
		{"http.url unparsable", withQueue(func(q *config.QueueConfig) { q.HTTP.URL = "http://a b:%zz" }), "config: queues.default.http.url:"},
		{"http.headers without url", withQueue(func(q *config.QueueConfig) { q.HTTP.Headers = map[string]string{"A": "b"} }),
			"config: queues.default.http.headers: must only be set together with queues.default.http.url"},
		{"http.headers bad name", withQueue(func(q *config.QueueConfig) {
			q.HTTP = config.HTTPTarget{URL: "http://h/", Method: "POST", Headers: map[string]string{"Bad Name": "x"}}
		}), `config: queues.default.http.headers: "Bad Name" is not a valid header name`},
		{"http.headers bad value", withQueue(func(q *config.QueueConfig) {
			q.HTTP = config.HTTPTarget{URL: "http://h/", Method: "POST", Headers: map[string]string{"X-A": "a\r\nX-Evil: 1"}}
		}), `config: queues.default.http.headers: the value of "X-A" contains a line break`},
		{"http.method GET", withQueue(func(q *config.QueueConfig) { q.HTTP.Method = "GET" }),
			`config: queues.default.http.method: must be one of POST, PUT (got "GET")`},
		{"http.method lower case", withQueue(func(q *config.QueueConfig) { q.HTTP.Method = "post" }), "config: queues.default.http.method:"},

		{"command", withQueue(func(q *config.QueueConfig) { q.Command = []string{"/bin/true"} }), ""},
		{"command empty program", withQueue(func(q *config.QueueConfig) { q.Command = []string{"", "x"} }),
			"config: queues.default.command: the program (the first element) must not be empty"},
		{"http and command", withQueue(func(q *config.QueueConfig) {
			q.HTTP.URL = "http://h/"
			q.Command = []string{"/bin/true"}
		}), "config: queues.default: set either http.url or command, not both"},
	}
	runValidate(t, tests, true)
}

func TestValidateKeepsURLSecret(t *testing.T) {
	t.Parallel()
	c := config.Default()
	q := c.Queues["default"]
	q.HTTP.URL = "ftp://user:hunter2@h/"
	q.HTTP.Headers = map[string]string{"Bad Name": "Bearer sekrit", "X-A": "sekrit2\n"}
	c.Queues["default"] = q
	err := c.Validate()
	wantErr(t, err, "config: queues.default.http.url:", "config: queues.default.http.headers:")
	for _, s := range []string{"hunter2", "sekrit"} {
		if strings.Contains(err.Error(), s) {
			t.Errorf("error shows the secret %q: %v", s, err)
		}
	}
}

// Type errors, unknown keys and validation errors from Load name the key
// the way the user wrote it.
func TestLoadNewKeyErrors(t *testing.T) {
	t.Parallel()
	tests := []loadErrCase{
		{"factor from text", "", []string{"-set", "queues.q.backoff.factor=fast"}, nil, []string{"config: queues.q.backoff.factor: expected a number"}},
		{"factor from bool", "queues:\n  q:\n    backoff:\n      factor: true\n", nil, nil, []string{"config: queues.q.backoff.factor: expected a number"}},
		{"backoff from scalar", "queues:\n  q:\n    backoff: 5s\n", nil, nil, []string{"config: queues.q.backoff: expected a mapping"}},
		{"headers from scalar", "queues:\n  q:\n    http:\n      headers: x\n", nil, nil, []string{"config: queues.q.http.headers: expected a mapping"}},
		{"header value from number", "queues:\n  q:\n    http:\n      url: http://h/\n      headers:\n        X-N: 5\n", nil, nil,
			[]string{"config: queues.q.http.headers[X-N]: expected a string"}},
		{"command from number", "queues:\n  q:\n    command: 5\n", nil, nil, []string{"config: queues.q.command: expected a list"}},
		{"concurrency from text", "", nil, []string{"HOURGLASS_QUEUES__Q__CONCURRENCY=lots"}, []string{"config: queues.q.concurrency: expected an integer"}},
		{"fetch_timeout without unit", "worker:\n  fetch_timeout: 2\n", nil, nil, []string{"config: worker.fetch_timeout: expected a duration"}},
		{"unknown http key", "queues:\n  q:\n    http:\n      uri: http://h/\n", nil, nil, []string{"config: queues.q.http.uri: unknown key"}},
		{"unknown backoff key via -set", "", []string{"-set", "queues.q.backoff.max=1s"}, nil, []string{"config: queues.q.backoff.max: unknown key"}},
		{"unknown worker key", "", nil, []string{"HOURGLASS_WORKER__THREADS=4"}, []string{"config: worker.threads: unknown key"}},
		{"unknown dlq key", "dlq:\n  size: 5\n", nil, nil, []string{"config: dlq.size: unknown key"}},
		{"validation of a dotted queue", "", []string{"-set", "queues.mail.high.backoff.factor=0.5"}, nil,
			[]string{"config: queues.mail.high.backoff.factor: must be between 1 and 100"}},
		{"both targets", "queues:\n  q:\n    http:\n      url: http://h/\n    command: [/bin/true]\n", nil, nil,
			[]string{"config: queues.q: set either http.url or command, not both"}},
		{"fetch_timeout fraction", "", []string{"-set", "worker.fetch_timeout=2500ms"}, nil, []string{"config: worker.fetch_timeout: must be a whole number"}},
		{"recovery_limit", "", nil, []string{"HOURGLASS_SCHEDULER__RECOVERY_LIMIT=-1"}, []string{"config: scheduler.recovery_limit:"}},
		{"dlq.max_size", "", []string{"-set", "dlq.max_size=-5"}, nil, []string{"config: dlq.max_size:"}},
	}
	runLoadErrors(t, tests)
}

func TestWithDefaults(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, nil, nil)
	if c.HTTP.Addr != "127.0.0.1:9464" {
		t.Errorf("scheduler http.addr = %q", c.HTTP.Addr)
	}
	w, err := config.Load(nil, nil, config.WithDefaults(config.WorkerDefaults))
	if err != nil {
		t.Fatal(err)
	}
	if w.HTTP.Addr != "127.0.0.1:9465" {
		t.Errorf("worker http.addr = %q, want 127.0.0.1:9465", w.HTTP.Addr)
	}
	// The sources still override binary defaults, and options apply in
	// order.
	w, err = config.Load(nil, []string{"HOURGLASS_HTTP__ADDR=:1"}, config.WithDefaults(config.WorkerDefaults))
	if err != nil || w.HTTP.Addr != ":1" {
		t.Errorf("env over WithDefaults: %v, %+v", err, w)
	}
	w, err = config.Load(nil, nil, config.WithDefaults(config.WorkerDefaults),
		config.WithDefaults(func(c *config.Config) { c.Shards = 8 }))
	if err != nil || w.HTTP.Addr != "127.0.0.1:9465" || w.Shards != 8 {
		t.Errorf("two options: %v, %+v", err, w)
	}
	// An invalid default is reported like any other value.
	_, err = config.Load(nil, nil, config.WithDefaults(func(c *config.Config) { c.Worker.FetchTimeout = -time.Second }))
	wantErr(t, err, "config: worker.fetch_timeout:")
	// Queues given as defaults replace the implicit "default" queue.
	w, err = config.Load([]string{"-set", "queues.b.max_retries=1"}, nil, config.WithDefaults(func(c *config.Config) {
		c.Queues = map[string]config.QueueConfig{"a": config.DefaultQueue()}
	}))
	if err != nil || len(w.Queues) != 2 || w.Queues["b"].MaxRetries != 1 {
		t.Errorf("queues from defaults: %v, %+v", err, w)
	}
}

func TestRedactedQueues(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, []string{
		"-set", "queues.hooks.http.url=https://user:pa55@hooks.example.com/x?a=1",
		"-set", "queues.hooks.http.headers.Authorization=Bearer t0k3n",
		"-set", "queues.plain.http.url=https://hooks.example.com/y",
		"-set", "queues.jobs.command=/bin/job",
	}, nil)
	r := c.Redacted()
	if got, want := r.Queues["hooks"].HTTP.URL, "https://user:[redacted]@hooks.example.com/x?a=1"; got != want {
		t.Errorf("url = %q, want %q", got, want)
	}
	if got := r.Queues["hooks"].HTTP.Headers["Authorization"]; got != "[redacted]" {
		t.Errorf("header = %q, want [redacted]", got)
	}
	if got := r.Queues["plain"].HTTP.URL; got != "https://hooks.example.com/y" {
		t.Errorf("url without password changed to %q", got)
	}
	if s := strings.Join([]string{r.Queues["hooks"].HTTP.URL, r.Queues["hooks"].HTTP.Headers["Authorization"]}, " "); strings.Contains(s, "pa55") || strings.Contains(s, "t0k3n") {
		t.Errorf("secret left in %q", s)
	}
	// The original is untouched and shares nothing with the copy.
	if c.Queues["hooks"].HTTP.Headers["Authorization"] != "Bearer t0k3n" || !strings.Contains(c.Queues["hooks"].HTTP.URL, "pa55") {
		t.Errorf("Redacted changed the original: %+v", c.Queues["hooks"])
	}
	r.Queues["jobs"].Command[0] = "changed"
	if c.Queues["jobs"].Command[0] != "/bin/job" {
		t.Errorf("Redacted shares a command slice with the original")
	}
}

func TestWorkerExampleFile(t *testing.T) {
	t.Parallel()
	const path = "../../configs/worker.example.yaml"
	c, err := config.Load([]string{"-config", path}, nil, config.WithDefaults(config.WorkerDefaults))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.HTTP.Addr != "127.0.0.1:9465" {
		t.Errorf("http.addr = %q", c.HTTP.Addr)
	}
	var nHTTP, nCommand int
	for name, q := range c.Queues {
		switch {
		case q.HTTP.URL != "":
			nHTTP++
			if q.HTTP.Headers["Authorization"] == "" {
				t.Errorf("queue %s: the HTTP example should show an Authorization header", name)
			}
		case len(q.Command) > 0:
			nCommand++
		}
	}
	if nHTTP != 1 || nCommand != 1 {
		t.Errorf("want one HTTP and one command queue, got %d and %d", nHTTP, nCommand)
	}
}

func TestFlowControlKeys(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load([]string{
		"-set", "queues.partner.max_concurrency=5",
		"-set", "queues.partner.rate_limit.rate=200",
		"-set", "queues.partner.rate_limit.burst=20",
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	q := cfg.Queues["partner"]
	if q.MaxConcurrency != 5 || q.RateLimit.Rate != 200 || q.RateLimit.Burst != 20 || q.RateLimit.Period != time.Second || q.RateLimit.Kind != "token_bucket" {
		t.Fatalf("partner queue: %+v", q)
	}
	for _, kind := range worker.LimiterKinds() {
		cfg, err := config.Load([]string{"-set", "queues.partner.rate_limit.rate=10", "-set", "queues.partner.rate_limit.kind=" + string(kind)}, nil)
		if err != nil {
			t.Fatalf("kind %s: %v", kind, err)
		}
		if got := cfg.Queues["partner"].ForWorker().Limiter; got != kind {
			t.Errorf("kind %s: the worker gets limiter %q", kind, got)
		}
	}
	for key, val := range map[string]string{
		"queues.partner.max_concurrency":   "-1",
		"queues.partner.rate_limit.rate":   "-5",
		"queues.partner.rate_limit.burst":  "-1",
		"queues.partner.rate_limit.period": "-1s",
		"queues.partner.rate_limit.kind":   "gcra",
	} {
		_, err := config.Load([]string{"-set", key + "=" + val}, nil)
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s=%s: error %v does not name the key", key, val, err)
		}
	}
	// A burst means nothing to a window limiter; a leaky bucket cannot
	// space starts closer than 1µs.
	for _, c := range []struct{ kind, burst, rate, period, key string }{
		{"sliding_window", "5", "10", "1s", "queues.partner.rate_limit.burst"},
		{"fixed_window", "2", "10", "1s", "queues.partner.rate_limit.burst"},
		{"leaky_bucket", "1", "1000000", "100ms", "queues.partner.rate_limit.rate"},
	} {
		_, err := config.Load([]string{"-set", "queues.partner.rate_limit.kind=" + c.kind, "-set", "queues.partner.rate_limit.burst=" + c.burst,
			"-set", "queues.partner.rate_limit.rate=" + c.rate, "-set", "queues.partner.rate_limit.period=" + c.period}, nil)
		if err == nil || !strings.Contains(err.Error(), c.key) {
			t.Errorf("%s with burst %s, %s per %s: error %v does not name %s", c.kind, c.burst, c.rate, c.period, err, c.key)
		}
	}
}
