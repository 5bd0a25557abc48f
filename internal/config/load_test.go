package config_test

import (
	"errors"
	"flag"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/config"
	"github.com/hourglass-sched/hourglass/internal/scan"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// writeYAML writes body to a temporary file and returns its path.
func writeYAML(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "hourglass.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// mustLoad loads or fails the test.
func mustLoad(t *testing.T, args, env []string) *config.Config {
	t.Helper()
	c, err := config.Load(args, env)
	if err != nil {
		t.Fatalf("Load(%q, %q): %v", args, env, err)
	}
	return c
}

// queue returns the default queue settings with MaxRetries and Timeout
// changed.
func queue(maxRetries int, timeout time.Duration) config.QueueConfig {
	q := config.DefaultQueue()
	q.MaxRetries, q.Timeout = maxRetries, timeout
	return q
}

// wantErr checks that err wraps ErrInvalid (unless notInvalid) and
// contains every fragment.
func wantErr(t *testing.T, err error, fragments ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one containing %q", fragments)
	}
	for _, f := range fragments {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("error %q does not contain %q", err, f)
		}
	}
}

// loadErrCase is a Load call that must fail with an error wrapping
// ErrInvalid and containing every fragment of want.
type loadErrCase struct {
	name      string
	file      string // YAML written to a file passed with -config; "" for none
	args, env []string
	want      []string
}

func runLoadErrors(t *testing.T, tests []loadErrCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			if tt.file != "" {
				args = append([]string{"-config", writeYAML(t, tt.file)}, args...)
			}
			_, err := config.Load(args, tt.env)
			wantErr(t, err, tt.want...)
			if !errors.Is(err, config.ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
		})
	}
}

// validateCase changes the default config; want "" means it stays valid,
// otherwise Validate reports a FieldError containing want (and, with
// oneError, no other error).
type validateCase struct {
	name   string
	change func(*config.Config)
	want   string
}

func runValidate(t *testing.T, tests []validateCase, oneError bool) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := config.Default()
			tt.change(&c)
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			wantErr(t, err, tt.want)
			if !errors.Is(err, config.ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			if n := strings.Count(err.Error(), "config: "); oneError && n != 1 {
				t.Errorf("want exactly one error, got %d: %v", n, err)
			}
			var fe *config.FieldError
			if !errors.As(err, &fe) || !strings.Contains(tt.want, fe.Key) {
				t.Errorf("errors.As FieldError: got %+v, want its key within %q", fe, tt.want)
			}
		})
	}
}

func TestLoadDefaults(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, nil, []string{"PATH=/bin", "HOURGLASS=1", "OTHER_REDIS__ADDR=x"})
	want := config.Default()
	if !reflect.DeepEqual(*c, want) {
		t.Fatalf("Load() = %+v\nwant %+v", *c, want)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"namespace", c.Namespace, "hourglass"},
		{"shards", c.Shards, 16},
		{"max_payload", c.MaxPayload, int64(1 << 20)},
		{"redis.addr", c.Redis.Addr, "127.0.0.1:6379"},
		{"redis.dial_timeout", c.Redis.DialTimeout, 5 * time.Second},
		{"etcd.endpoints", c.Etcd.Endpoints, []string{"http://127.0.0.1:2379"}},
		{"etcd.dial_timeout", c.Etcd.DialTimeout, 5 * time.Second},
		{"scheduler.lease_ttl", c.Scheduler.LeaseTTL, 5 * time.Second},
		{"scheduler.scan_limit", c.Scheduler.ScanLimit, 512},
		{"scheduler.safety_recheck", c.Scheduler.SafetyRecheck, 30 * time.Second},
		{"queues", c.Queues, map[string]config.QueueConfig{"default": queue(25, 30*time.Second)}},
		{"http.addr", c.HTTP.Addr, "127.0.0.1:9464"},
		{"log.level", c.Log.Level, "info"},
		{"log.format", c.Log.Format, "text"},
	}
	for _, ch := range checks {
		if !reflect.DeepEqual(ch.got, ch.want) {
			t.Errorf("%s = %v, want %v", ch.name, ch.got, ch.want)
		}
	}
}

func TestLoadFile(t *testing.T) {
	t.Parallel()
	ca := testenv.NewPKI(t).CA // TLS files are read: it must exist
	path := writeYAML(t, strings.ReplaceAll(`
namespace: prod
shards: 64
max_payload: 4096
redis:
  addr: "redis.internal:6380"
  username: svc
  password: pw
  db: 3
  pool_size: 20
  dial_timeout: 250ms
  tls:
    enabled: true
    ca_file: /etc/ca.pem
    server_name: redis.internal
etcd:
  endpoints: ["https://e1:2379", "https://e2:2379"]
  dial_timeout: 2s
scheduler:
  replica_id: sched-1
  lease_ttl: 10s
  scan_limit: 1000
  safety_recheck: 1m
  recovery_limit: 100
  strand_check: 250ms
worker:
  shutdown_grace: 0s
  fetch_timeout: 5s
  ack_linger: 0s
dlq:
  max_size: 0
  max_age: 24h
queues:
  emails:
    timeout: 5s
  mail.high:
    max_retries: 3
  empty:
  hooks:
    backoff:
      base: 100ms
      cap: 10m
      factor: 1.5
    concurrency: 50
    handler_timeout: 0s
    lease_after: 0s
    http:
      url: "https://hooks.example.com/run?x=1"
      method: PUT
      headers:
        Authorization: "Bearer t0k3n"
        x-tenant-id: "7"
  jobs:
    handler_timeout: 5m
    command: ["/usr/local/bin/job", "--from-stdin"]
http:
  addr: ""
log:
  level: debug
  format: json
`, "/etc/ca.pem", ca))
	c := mustLoad(t, []string{"-config", path}, nil)
	want := config.Config{
		Namespace:     "prod",
		Shards:        64,
		MaxPayload:    4096,
		LayoutRefresh: time.Minute,
		Redis: config.RedisConfig{
			Mode: "standalone", Addr: "redis.internal:6380", Addrs: []string{}, Username: "svc", Password: "pw", DB: 3,
			PoolSize: 20, DialTimeout: 250 * time.Millisecond,
			TLS: config.TLSConfig{Enabled: true, CAFile: ca, ServerName: "redis.internal"},
		},
		Etcd: config.EtcdConfig{
			Endpoints:   []string{"https://e1:2379", "https://e2:2379"},
			DialTimeout: 2 * time.Second,
		},
		Scheduler: config.SchedulerConfig{
			ReplicaID: "sched-1", LeaseTTL: 10 * time.Second, ScanLimit: 1000, SafetyRecheck: time.Minute,
			RecoveryLimit: 100, StrandCheck: 250 * time.Millisecond, IdleRecheck: 5 * time.Minute, FarBucket: time.Minute, FarLead: 15 * time.Second, Prefetch: scan.DefaultPrefetch,
			ReshardRate: 5000, MisfireGrace: time.Minute, ReshardReadyAfter: time.Minute, TaskEncoding: "auto",
		},
		Worker: config.WorkerConfig{ShutdownGrace: 0, FetchTimeout: 5 * time.Second, AckLinger: 0, RegistrationWait: time.Minute, Tags: []string{}},
		DLQ:    config.DLQConfig{MaxSize: 0, MaxAge: 24 * time.Hour},
		// A queues section replaces the implicit "default" queue, and
		// every queue gets the defaults for the fields it leaves out.
		Queues: map[string]config.QueueConfig{
			"emails":    queue(25, 5*time.Second),
			"mail.high": queue(3, 30*time.Second),
			"empty":     config.DefaultQueue(),
			"hooks": {
				MaxRetries: 25, Timeout: 30 * time.Second,
				Backoff:     config.BackoffConfig{Base: 100 * time.Millisecond, Cap: 10 * time.Minute, Factor: 1.5},
				Concurrency: 50, HandlerTimeout: 0, LeaseAfter: 0, RetentionCount: shard.DefaultRetentionCount, FairWindow: shard.DefaultFairWindow,
				RateLimit:    config.RateLimitConfig{Period: time.Second, Burst: 1, Kind: "token_bucket"},
				KeyRateLimit: config.KeyRateConfig{Period: time.Second, Burst: 1, Kind: "token_bucket"},
				HTTP: config.HTTPTarget{
					URL:     "https://hooks.example.com/run?x=1",
					Method:  "PUT",
					Headers: map[string]string{"Authorization": "Bearer t0k3n", "X-Tenant-Id": "7"},
				},
			},
			"jobs": func() config.QueueConfig {
				q := config.DefaultQueue()
				q.HandlerTimeout = 5 * time.Minute
				q.Command = []string{"/usr/local/bin/job", "--from-stdin"}
				return q
			}(),
		},
		HTTP: config.HTTPConfig{Addr: "", Dashboard: config.DashboardConfig{Enabled: true, AllowedHosts: []string{}}},
		Log:  config.LogConfig{Level: "debug", Format: "json"},
	}
	if !reflect.DeepEqual(*c, want) {
		t.Fatalf("got  %+v\nwant %+v", *c, want)
	}
}

func TestLoadPrecedence(t *testing.T) {
	t.Parallel()
	path := writeYAML(t, "redis:\n  addr: file:1\nscheduler:\n  scan_limit: 10\n")
	tests := []struct {
		name      string
		args, env []string
		wantAddr  string
		wantLimit int
	}{
		{"defaults", nil, nil, "127.0.0.1:6379", 512},
		{"file", []string{"-config", path}, nil, "file:1", 10},
		{"env over default", nil, []string{"HOURGLASS_REDIS__ADDR=env:2"}, "env:2", 512},
		{"env over file", []string{"-config", path}, []string{"HOURGLASS_REDIS__ADDR=env:2"}, "env:2", 10},
		{"flag over env", []string{"-config", path, "-set", "redis.addr=flag:3"}, []string{"HOURGLASS_REDIS__ADDR=env:2"}, "flag:3", 10},
		{"flag over file", []string{"-config", path, "-set", "scheduler.scan_limit=20"}, nil, "file:1", 20},
		{"last flag wins", []string{"-set", "redis.addr=a:1", "-set", "redis.addr=b:2"}, nil, "b:2", 512},
		{"flag before -config still wins", []string{"-set", "scheduler.scan_limit=30", "-config", path}, []string{"HOURGLASS_SCHEDULER__SCAN_LIMIT=40"}, "file:1", 30},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustLoad(t, tt.args, tt.env)
			if c.Redis.Addr != tt.wantAddr || c.Scheduler.ScanLimit != tt.wantLimit {
				t.Errorf("redis.addr = %q, scheduler.scan_limit = %d; want %q, %d",
					c.Redis.Addr, c.Scheduler.ScanLimit, tt.wantAddr, tt.wantLimit)
			}
		})
	}
}

func TestLoadEnvAndFlagForms(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		args, env []string
		check     func(*config.Config) bool
	}{
		{
			"endpoints from env, comma-separated",
			nil, []string{"HOURGLASS_ETCD__ENDPOINTS=http://a:1, http://b:2"},
			func(c *config.Config) bool {
				return reflect.DeepEqual(c.Etcd.Endpoints, []string{"http://a:1", "http://b:2"})
			},
		},
		{
			"endpoints from -set, comma-separated",
			[]string{"-set", "etcd.endpoints=http://a:1,http://b:2,http://c:3"}, nil,
			func(c *config.Config) bool {
				return reflect.DeepEqual(c.Etcd.Endpoints, []string{"http://a:1", "http://b:2", "http://c:3"})
			},
		},
		{
			"shorter -set list replaces a longer env list",
			[]string{"-set", "etcd.endpoints=http://x:1"}, []string{"HOURGLASS_ETCD__ENDPOINTS=http://a:1,http://b:2"},
			func(c *config.Config) bool { return reflect.DeepEqual(c.Etcd.Endpoints, []string{"http://x:1"}) },
		},
		{
			"bool and duration from env",
			nil, []string{"HOURGLASS_REDIS__TLS__ENABLED=true", "HOURGLASS_SCHEDULER__LEASE_TTL=10s"},
			func(c *config.Config) bool { return c.Redis.TLS.Enabled && c.Scheduler.LeaseTTL == 10*time.Second },
		},
		{
			"queue from env gets defaults and replaces the default queue",
			nil, []string{"HOURGLASS_QUEUES__EMAILS__MAX_RETRIES=5"},
			func(c *config.Config) bool {
				return reflect.DeepEqual(c.Queues, map[string]config.QueueConfig{"emails": queue(5, 30*time.Second)})
			},
		},
		{
			"queue name with dots from -set",
			[]string{"-set", "queues.mail.high.timeout=2s"}, nil,
			func(c *config.Config) bool {
				return reflect.DeepEqual(c.Queues, map[string]config.QueueConfig{"mail.high": queue(25, 2*time.Second)})
			},
		},
		{
			"empty env value disables http",
			nil, []string{"HOURGLASS_HTTP__ADDR="},
			func(c *config.Config) bool { return c.HTTP.Addr == "" },
		},
		{
			"value containing '='",
			[]string{"-set", "redis.password=a=b"}, nil,
			func(c *config.Config) bool { return c.Redis.Password == "a=b" },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if c := mustLoad(t, tt.args, tt.env); !tt.check(c) {
				t.Errorf("unexpected config %+v", c)
			}
		})
	}
}

func TestLoadQueueMerge(t *testing.T) {
	t.Parallel()
	path := writeYAML(t, "queues:\n  emails:\n    timeout: 5s\n")
	c := mustLoad(t, []string{"-config", path, "-set", "queues.emails.max_retries=1"},
		[]string{"HOURGLASS_QUEUES__SMS__TIMEOUT=1s"})
	want := map[string]config.QueueConfig{
		"emails": queue(1, 5*time.Second),
		"sms":    queue(25, time.Second),
	}
	if !reflect.DeepEqual(c.Queues, want) {
		t.Fatalf("queues = %v, want %v", c.Queues, want)
	}
}

func TestLoadUnknownKey(t *testing.T) {
	t.Parallel()
	tests := []loadErrCase{
		{"file nested", "redis:\n  adr: x\n", nil, nil, []string{"config: redis.adr: unknown key", "hourglass.yaml"}},
		{"file top level", "colour: red\n", nil, nil, []string{"config: colour: unknown key"}},
		{"file tls", "etcd:\n  tls:\n    ca: x\n", nil, nil, []string{"config: etcd.tls.ca: unknown key"}},
		{"file queue field", "queues:\n  q1:\n    retries: 3\n", nil, nil, []string{"config: queues.q1.retries: unknown key"}},
		{"env", "", nil, []string{"HOURGLASS_REDIS__ADR=x"}, []string{"config: redis.adr: unknown key", "HOURGLASS_REDIS__ADR"}},
		{"env single underscore", "", nil, []string{"HOURGLASS_REDIS_ADDR=x"}, []string{"config: redis_addr: unknown key"}},
		{"flag", "", []string{"-set", "scheduler.scan=1"}, nil, []string{"config: scheduler.scan: unknown key", "-set scheduler.scan"}},
		{"flag queue field", "", []string{"-set", "queues.a.b.tmeout=1s"}, nil, []string{"config: queues.a.b.tmeout: unknown key"}},
		{"several", "foo: 1\nbar: 2\n", nil, nil, []string{"config: bar: unknown key", "config: foo: unknown key"}},
		{"with a type error", "", nil, []string{"HOURGLASS_REDIS__ADR=x", "HOURGLASS_SCHEDULER__LEASE_TTL=5"},
			[]string{"config: redis.adr: unknown key", "config: scheduler.lease_ttl: invalid duration"}},
	}
	runLoadErrors(t, tests)
}

// An out-of-range value names where it came from, as an unknown key does.
func TestLoadOutOfRangeNamesSource(t *testing.T) {
	t.Parallel()
	tests := []loadErrCase{
		{"file", "shards: -1\n", nil, nil, []string{"config: shards: must be between", "(file ", "hourglass.yaml)"}},
		{"env", "", nil, []string{"HOURGLASS_SCHEDULER__LEASE_TTL=1s"}, []string{"config: scheduler.lease_ttl:", "(environment variable HOURGLASS_SCHEDULER__LEASE_TTL)"}},
		{"flag over file", "shards: -1\n", []string{"-set", "shards=100000"}, nil, []string{"config: shards: must be between", "(-set shards)"}},
		{"queue key with dots", "", []string{"-set", "queues.a.b.concurrency=-1"}, nil, []string{"config: queues.a.b.concurrency:", "(-set queues.a.b.concurrency)"}},
	}
	runLoadErrors(t, tests)
}

func TestLoadWrongType(t *testing.T) {
	t.Parallel()
	tests := []loadErrCase{
		{"bad duration in file", "scheduler:\n  lease_ttl: 5x\n", nil, nil, []string{"config: scheduler.lease_ttl: invalid duration"}},
		{"duration without unit", "redis:\n  dial_timeout: 5\n", nil, nil, []string{"config: redis.dial_timeout: expected a duration"}},
		{"bad duration in env", "", nil, []string{"HOURGLASS_SCHEDULER__SAFETY_RECHECK=soon"}, []string{"config: scheduler.safety_recheck: invalid duration"}},
		{"bad duration in flag", "", []string{"-set", "etcd.dial_timeout=1 second"}, nil, []string{"config: etcd.dial_timeout: invalid duration"}},
		{"bad queue duration", "queues:\n  q:\n    timeout: never\n", nil, nil, []string{"config: queues.q.timeout: invalid duration"}},
		{"int from text", "", []string{"-set", "shards=many"}, nil, []string{"config: shards: expected an integer"}},
		{"int from bool", "redis:\n  db: true\n", nil, nil, []string{"config: redis.db: expected an integer"}},
		{"int from fraction", "shards: 1.5\n", nil, nil, []string{"config: shards: expected an integer"}},
		{"bool from text", "", nil, []string{"HOURGLASS_ETCD__TLS__ENABLED=maybe"}, []string{"config: etcd.tls.enabled: expected true or false"}},
		{"string from number", "redis:\n  password: 1234\n", nil, nil, []string{"config: redis.password: expected a string"}},
		{"section from scalar", "redis: localhost\n", nil, nil, []string{"config: redis: expected a mapping"}},
		{"list from number", "etcd:\n  endpoints: 5\n", nil, nil, []string{"config: etcd.endpoints: expected a list"}},
		{"list element", "etcd:\n  endpoints: [http://a:1, 7]\n", nil, nil, []string{"config: etcd.endpoints[1]: expected a string"}},
		{"queues from scalar", "queues: x\n", nil, nil, []string{"config: queues: expected a mapping"}},
		{"queue from scalar", "queues:\n  q: 5\n", nil, nil, []string{"config: queues.q: expected a mapping"}},
	}
	runLoadErrors(t, tests)
}

func TestLoadFileErrors(t *testing.T) {
	t.Parallel()
	bad := writeYAML(t, "redis:\n  addr: [unclosed\n")
	_, err := config.Load([]string{"-config", bad}, nil)
	wantErr(t, err, "config: file "+bad)

	missing := filepath.Join(t.TempDir(), "nope.yaml")
	_, err = config.Load([]string{"-config", missing}, nil)
	wantErr(t, err, missing)
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("error %v does not wrap os.ErrNotExist", err)
	}

	notMap := writeYAML(t, "- a\n- b\n")
	_, err = config.Load([]string{"-config", notMap}, nil)
	wantErr(t, err, notMap)

	// An empty file is an empty layer.
	mustLoad(t, []string{"-config", writeYAML(t, "")}, nil)
}

func TestLoadFlagErrors(t *testing.T) {
	t.Parallel()
	_, err := config.Load([]string{"-h"}, nil)
	if !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: got %v, want flag.ErrHelp", err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"-verbose"}, "-verbose"},
		{"set without value", []string{"-set", "redis.addr"}, "want key=value"},
		{"set empty key", []string{"-set", "=x"}, "want key=value"},
		{"set empty segment", []string{"-set", "redis..addr=x"}, "empty segment"},
		{"positional argument", []string{"extra"}, `unexpected argument "extra"`},
		{"missing -config value", []string{"-config"}, "config"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.Load(tt.args, nil)
			wantErr(t, err, tt.want)
		})
	}
	if !strings.Contains(config.Usage(), "-set key=value") {
		t.Errorf("Usage() does not describe -set:\n%s", config.Usage())
	}
}

func TestRedacted(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, []string{"-set", "redis.password=s3cret", "-set", "etcd.password=hunter2",
		"-set", "http.dashboard.username=ops", "-set", "http.dashboard.password=b4sic"}, nil)
	r := c.Redacted()
	if r.Redis.Password != "[redacted]" || r.Etcd.Password != "[redacted]" || r.HTTP.Dashboard.Password != "[redacted]" {
		t.Errorf("passwords not redacted: %q %q %q", r.Redis.Password, r.Etcd.Password, r.HTTP.Dashboard.Password)
	}
	s := mustLoad(t, []string{"-set", "redis.mode=sentinel", "-set", "redis.addrs=s1:26379,s2:26379",
		"-set", "redis.master_name=main", "-set", "redis.sentinel_password=watch3r", "-set", "redis.addr="}, nil)
	if rs := s.Redacted(); rs.Redis.SentinelPassword != "[redacted]" || s.Redis.SentinelPassword != "watch3r" {
		t.Errorf("sentinel password: redacted %q, original %q", rs.Redis.SentinelPassword, s.Redis.SentinelPassword)
	} else if rs.Redis.Addrs[0] = "changed"; s.Redis.Addrs[0] == "changed" {
		t.Errorf("Redacted shares redis.addrs with the original")
	}
	if _, err := config.Load([]string{"-set", "http.dashboard.username=ops"}, nil); err == nil || !strings.Contains(err.Error(), "http.dashboard.password") {
		t.Errorf("a username without a password: %v", err)
	}
	if c.Redis.Password != "s3cret" || c.Etcd.Password != "hunter2" {
		t.Errorf("Redacted changed the original: %q %q", c.Redis.Password, c.Etcd.Password)
	}
	r.Etcd.Endpoints[0] = "changed"
	r.Queues["new"] = config.QueueConfig{}
	if c.Etcd.Endpoints[0] == "changed" || len(c.Queues) != 1 {
		t.Errorf("Redacted shares slices or maps with the original")
	}
	if empty := config.Default().Redacted(); empty.Redis.Password != "" || empty.Etcd.Password != "" {
		t.Errorf("empty passwords should stay empty: %+v", empty)
	}
}

func TestExampleFile(t *testing.T) {
	t.Parallel()
	const path = "../../configs/scheduler.example.yaml"
	c := mustLoad(t, []string{"-config", path}, nil)
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	// The example documents the defaults, so it must load to them, with
	// the worker example's queues registered besides "default".
	got, want := *c, config.Default()
	if !reflect.DeepEqual(got.Queues["default"], want.Queues["default"]) {
		t.Errorf("example's default queue differs from Default():\n got  %+v\n want %+v", got.Queues["default"], want.Queues["default"])
	}
	got.Queues, want.Queues = nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("example differs from Default():\n got  %+v\n want %+v", got, want)
	}
}

// TestExamplesAgree: every queue the worker example consumes is registered
// by the scheduler example, with the same registered settings, so that a
// newcomer running both gets no "unknown queue".
func TestExamplesAgree(t *testing.T) {
	t.Parallel()
	s := mustLoad(t, []string{"-config", "../../configs/scheduler.example.yaml"}, nil)
	w := mustLoad(t, []string{"-config", "../../configs/worker.example.yaml"}, nil)
	if s.Namespace != w.Namespace || s.Shards != w.Shards {
		t.Errorf("namespace/shards: scheduler %s/%d, worker %s/%d", s.Namespace, s.Shards, w.Namespace, w.Shards)
	}
	for name, wq := range w.Queues {
		sq, ok := s.Queues[name]
		switch {
		case !ok:
			t.Errorf("the worker example consumes %q, which the scheduler example does not register", name)
		case sq.MaxRetries != wq.MaxRetries || sq.Timeout != wq.Timeout || sq.Backoff != wq.Backoff:
			t.Errorf("queue %q registered as %+v, the worker's %+v", name, sq, wq)
		}
	}
}
