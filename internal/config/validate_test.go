package config_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/config"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	pki := testenv.NewPKI(t) // TLS files are read: they must exist
	tests := []validateCase{
		{"defaults", func(*config.Config) {}, ""},

		{"namespace empty: the default", func(c *config.Config) { c.Namespace = "" }, ""},
		{"namespace bad char", func(c *config.Config) { c.Namespace = "a:b" }, "config: namespace: must match"},
		{"namespace too long", func(c *config.Config) { c.Namespace = strings.Repeat("a", 33) }, "config: namespace:"},
		{"shards zero: the default", func(c *config.Config) { c.Shards = 0 }, ""},
		{"shards negative", func(c *config.Config) { c.Shards = -1 }, "config: shards: must be between 1 and 4096 (got -1)"},
		{"shards max", func(c *config.Config) { c.Shards = 4096 }, ""},
		{"shards too many", func(c *config.Config) { c.Shards = 4097 }, "config: shards:"},
		{"max_payload zero", func(c *config.Config) { c.MaxPayload = 0 }, "config: max_payload:"},
		{"max_payload too big", func(c *config.Config) { c.MaxPayload = 512<<20 + 1 }, "config: max_payload:"},

		{"redis.addr empty", func(c *config.Config) { c.Redis.Addr = "" }, "config: redis.addr: must be host:port"},
		{"redis.addr no port", func(c *config.Config) { c.Redis.Addr = "localhost" }, "config: redis.addr: must be host:port"},
		{"redis.addr no host", func(c *config.Config) { c.Redis.Addr = ":6379" }, "config: redis.addr: must name a host"},
		{"redis.addr bad port", func(c *config.Config) { c.Redis.Addr = "h:redis" }, "config: redis.addr: must have a port"},
		{"redis.addr ipv6", func(c *config.Config) { c.Redis.Addr = "[::1]:6379" }, ""},
		{"redis.db negative", func(c *config.Config) { c.Redis.DB = -1 }, "config: redis.db:"},
		{"redis.db 16", func(c *config.Config) { c.Redis.DB = 16 }, "config: redis.db: must be between 0 and 15 (got 16)"},
		{"redis.pool_size negative", func(c *config.Config) { c.Redis.PoolSize = -1 }, "config: redis.pool_size:"},
		{"redis.dial_timeout zero", func(c *config.Config) { c.Redis.DialTimeout = 0 }, "config: redis.dial_timeout: must be positive"},
		{"dashboard allowed host", func(c *config.Config) { c.HTTP.Dashboard.AllowedHosts = []string{"hg.example.com"} }, ""},
		{"dashboard allowed host with port", func(c *config.Config) {
			c.HTTP.Dashboard.AllowedHosts = []string{"hg.example.com:443"}
		}, "config: http.dashboard.allowed_hosts[0]: must be a host name without scheme or port"},
		{"redis.mode unknown", func(c *config.Config) { c.Redis.Mode = "replicated" }, `config: redis.mode: must be one of standalone, sentinel, cluster (got "replicated")`},
		{"redis.addrs in standalone", func(c *config.Config) { c.Redis.Addrs = []string{"a:1"} }, "config: redis.addrs: is for modes sentinel and cluster"},
		{"sentinel", func(c *config.Config) {
			c.Redis.Mode, c.Redis.Addrs, c.Redis.MasterName = "sentinel", []string{"s1:26379", "s2:26379"}, "main"
			c.Redis.SentinelPassword = "pw"
		}, ""},
		{"sentinel without master_name", func(c *config.Config) {
			c.Redis.Mode, c.Redis.Addrs = "sentinel", []string{"s1:26379"}
		}, "config: redis.master_name: is required in mode sentinel"},
		{"sentinel without addrs", func(c *config.Config) {
			c.Redis.Mode, c.Redis.MasterName = "sentinel", "main"
		}, "config: redis.addrs: at least one address is required in mode sentinel"},
		{"sentinel with a bad addr", func(c *config.Config) {
			c.Redis.Mode, c.Redis.Addrs, c.Redis.MasterName = "sentinel", []string{"s1:26379", "s2"}, "main"
		}, "config: redis.addrs[1]: must be host:port"},
		{"sentinel with redis.addr", func(c *config.Config) {
			c.Redis.Mode, c.Redis.Addrs, c.Redis.MasterName, c.Redis.Addr = "sentinel", []string{"s1:26379"}, "main", "r:6379"
		}, "config: redis.addr: is for mode standalone"},
		{"cluster", func(c *config.Config) { c.Redis.Mode, c.Redis.Addrs = "cluster", []string{"n1:6379"} }, ""},
		{"cluster with db", func(c *config.Config) { c.Redis.Mode, c.Redis.Addrs, c.Redis.DB = "cluster", []string{"n1:6379"}, 2 }, "config: redis.db: must be 0 in mode cluster"},
		{"cluster with master_name", func(c *config.Config) {
			c.Redis.Mode, c.Redis.Addrs, c.Redis.MasterName = "cluster", []string{"n1:6379"}, "main"
		}, "config: redis.master_name: is for mode sentinel only"},
		{"standalone with a sentinel password", func(c *config.Config) { c.Redis.SentinelPassword = "pw" }, "config: redis.sentinel_password: is for mode sentinel only"},
		{"standalone with a sentinel user", func(c *config.Config) { c.Redis.SentinelUsername = "watch" }, "config: redis.sentinel_username: is for mode sentinel only"},
		{"redis.tls cert without key", func(c *config.Config) {
			c.Redis.TLS = config.TLSConfig{Enabled: true, CertFile: "c.pem"}
		}, "config: redis.tls.key_file: must be set when redis.tls.cert_file is set"},
		{"redis.tls key without cert", func(c *config.Config) {
			c.Redis.TLS = config.TLSConfig{Enabled: true, KeyFile: "k.pem"}
		}, "config: redis.tls.cert_file:"},
		{"redis.tls settings while disabled", func(c *config.Config) {
			c.Redis.TLS = config.TLSConfig{CAFile: "ca.pem"}
		}, "config: redis.tls.enabled: must be true"},
		{"redis.tls complete", func(c *config.Config) {
			c.Redis.TLS = config.TLSConfig{Enabled: true, CAFile: pki.CA, CertFile: pki.ClientCert, KeyFile: pki.ClientKey}
		}, ""},

		{"etcd.endpoints empty", func(c *config.Config) { c.Etcd.Endpoints = nil }, "config: etcd.endpoints: at least one"},
		{"etcd.endpoints no scheme", func(c *config.Config) { c.Etcd.Endpoints = []string{"127.0.0.1:2379"} }, "config: etcd.endpoints[0]:"},
		{"etcd.endpoints bad scheme", func(c *config.Config) {
			c.Etcd.Endpoints = []string{"http://a:1", "unix:///tmp/etcd.sock"}
		}, "config: etcd.endpoints[1]: must be an http:// or https:// URL"},
		{"etcd.endpoints no host", func(c *config.Config) { c.Etcd.Endpoints = []string{"http://"} }, "config: etcd.endpoints[0]:"},
		{"etcd.endpoints unparsable", func(c *config.Config) { c.Etcd.Endpoints = []string{"http://a b:%zz"} }, "config: etcd.endpoints[0]:"},
		{"etcd.dial_timeout negative", func(c *config.Config) { c.Etcd.DialTimeout = -time.Second }, "config: etcd.dial_timeout:"},
		{"etcd.tls cert without key", func(c *config.Config) {
			c.Etcd.TLS = config.TLSConfig{Enabled: true, CertFile: "c.pem"}
		}, "config: etcd.tls.key_file:"},
		{"etcd.tls settings while disabled", func(c *config.Config) {
			c.Etcd.TLS = config.TLSConfig{InsecureSkipVerify: true}
		}, "config: etcd.tls.enabled:"},

		{"scheduler.replica_id bad", func(c *config.Config) { c.Scheduler.ReplicaID = "a/b" }, "config: scheduler.replica_id:"},
		{"scheduler.replica_id ok", func(c *config.Config) { c.Scheduler.ReplicaID = "host-1.pid_42" }, ""},
		{"scheduler.lease_ttl short", func(c *config.Config) { c.Scheduler.LeaseTTL = 500 * time.Millisecond },
			"config: scheduler.lease_ttl: must be at least 2s (got 500ms)"},
		{"scheduler.lease_ttl long", func(c *config.Config) { c.Scheduler.LeaseTTL = 61 * time.Second },
			"config: scheduler.lease_ttl: must be at most 1m0s (got 1m1s)"},
		{"scheduler.lease_ttl fraction", func(c *config.Config) { c.Scheduler.LeaseTTL = 2500 * time.Millisecond },
			"config: scheduler.lease_ttl: must be a whole number of seconds"},
		{"scheduler.scan_limit zero: the default", func(c *config.Config) { c.Scheduler.ScanLimit = 0 }, ""},
		{"scheduler.scan_limit negative", func(c *config.Config) { c.Scheduler.ScanLimit = -1 }, "config: scheduler.scan_limit:"},
		{"scheduler.scan_limit big", func(c *config.Config) { c.Scheduler.ScanLimit = 10001 }, "config: scheduler.scan_limit:"},
		{"scheduler.safety_recheck short", func(c *config.Config) { c.Scheduler.SafetyRecheck = 99 * time.Millisecond },
			"config: scheduler.safety_recheck: must be at least 100ms"},

		{"queues none", func(c *config.Config) { c.Queues = nil }, "config: queues: at least one queue"},
		{"queue name bad", func(c *config.Config) { c.Queues["a b"] = config.DefaultQueue() }, "config: queues.a b: queue name must match"},
		{"queue name long", func(c *config.Config) { c.Queues[strings.Repeat("q", 129)] = config.DefaultQueue() },
			"config: queues." + strings.Repeat("q", 129) + ": queue name must match"},
		{"queue name odd but valid", func(c *config.Config) { c.Queues["mail.high:v2-x_y"] = config.DefaultQueue() }, ""},
		{"queue max_retries negative", func(c *config.Config) {
			c.Queues["default"] = queue(-1, time.Second)
		}, "config: queues.default.max_retries:"},
		{"queue max_retries big", func(c *config.Config) {
			c.Queues["default"] = queue(1001, time.Second)
		}, "config: queues.default.max_retries:"},
		{"queue timeout short", func(c *config.Config) {
			c.Queues["default"] = queue(1, time.Millisecond)
		}, "config: queues.default.timeout: must be at least 100ms"},

		{"http.addr empty disables", func(c *config.Config) { c.HTTP.Addr = "" }, ""},
		{"http.addr all interfaces", func(c *config.Config) { c.HTTP.Addr = ":9464" }, ""},
		{"http.addr bad", func(c *config.Config) { c.HTTP.Addr = "9464" }, "config: http.addr: must be host:port"},
		{"http.addr port range", func(c *config.Config) { c.HTTP.Addr = "h:70000" }, "config: http.addr: must have a port"},
		{"log.level", func(c *config.Config) { c.Log.Level = "verbose" }, `config: log.level: must be one of trace, debug, info, warn, error (got "verbose")`},
		{"log.format", func(c *config.Config) { c.Log.Format = "xml" }, "config: log.format:"},
	}
	runValidate(t, tests, false)
}

func TestValidateReportsAll(t *testing.T) {
	t.Parallel()
	c := config.Default()
	c.Shards = -1
	c.Log.Level = "loud"
	err := c.Validate()
	wantErr(t, err, "config: shards:", "config: log.level:")
}

// Validation runs inside Load, and the key in its errors is the one a
// user would type.
func TestLoadValidates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		args, env []string
		want      string
	}{
		{"lease_ttl from flag", []string{"-set", "scheduler.lease_ttl=500ms"}, nil,
			"config: scheduler.lease_ttl: must be at least 2s (got 500ms)"},
		{"endpoint from env", nil, []string{"HOURGLASS_ETCD__ENDPOINTS=http://a:1,b:2"}, "config: etcd.endpoints[1]:"},
		{"empty endpoints", []string{"-set", "etcd.endpoints="}, nil, "config: etcd.endpoints: at least one"},
		{"queue timeout", []string{"-set", "queues.q.timeout=1ms"}, nil, "config: queues.q.timeout:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.Load(tt.args, tt.env)
			wantErr(t, err, tt.want)
			if !errors.Is(err, config.ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
		})
	}
	_, err := config.Load([]string{"-config", writeYAML(t, "queues: {}\n")}, nil)
	wantErr(t, err, "config: queues: at least one queue")
}

// TestExposesWritableDashboard: a dashboard is exposed when it is on,
// writable and without auth on an address that is not loopback.
func TestExposesWritableDashboard(t *testing.T) {
	t.Parallel()
	open := config.DashboardConfig{Enabled: true}
	for _, c := range []struct {
		addr string
		d    config.DashboardConfig
		want bool
	}{
		{"0.0.0.0:9464", open, true},
		{":9464", open, true},
		{"[::]:9464", open, true},
		{"10.1.2.3:9464", open, true},
		{"hg.internal:9464", open, true},
		{"127.0.0.1:9464", open, false},
		{"127.0.0.53:9464", open, false},
		{"[::1]:9464", open, false},
		{"localhost:9464", open, false},
		{"", open, false},
		{"0.0.0.0:9464", config.DashboardConfig{Enabled: true, ReadOnly: true}, false},
		{"0.0.0.0:9464", config.DashboardConfig{Enabled: true, Username: "ops", Password: "pw"}, false},
		{"0.0.0.0:9464", config.DashboardConfig{}, false},
	} {
		if got := (config.HTTPConfig{Addr: c.addr, Dashboard: c.d}).ExposesWritableDashboard(); got != c.want {
			t.Errorf("%+v on %q: %v, want %v", c.d, c.addr, got, c.want)
		}
	}
}
