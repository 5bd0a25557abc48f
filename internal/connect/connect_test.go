package connect_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/hourglass-sched/hourglass/internal/config"
	"github.com/hourglass-sched/hourglass/internal/connect"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

func TestMain(m *testing.M) {
	// A client whose dials keep failing (the TLS tests' wrong server
	// name) has its pool probe the server in the background, once a
	// second, until the pool is closed: after Close that goroutine ends
	// within a second, which can outlast goleak's retries.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// redisConfig returns the default Redis section pointed at addr.
func redisConfig(addr string) config.RedisConfig {
	c := config.Default().Redis
	c.Addr = addr
	c.DialTimeout = 2 * time.Second
	return c
}

// pingRedis builds a client from cfg, pings once and closes it.
func pingRedis(t *testing.T, cfg config.RedisConfig) error {
	t.Helper()
	c, err := connect.Redis(cfg)
	if err != nil {
		t.Fatalf("connect.Redis: %v", err)
	}
	defer c.Close()
	return c.Ping(testenv.Ctx(t, 10*time.Second)).Err()
}

func TestRedisPassword(t *testing.T) {
	t.Parallel()
	r := testenv.StartRedis(t, testenv.WithRedisArgs("--requirepass", "s3cret"))
	tests := []struct {
		name     string
		password string
		wantErr  string // "" means the ping succeeds
	}{
		{"correct password", "s3cret", ""},
		{"wrong password", "guess", "WRONGPASS"},
		{"no password", "", "NOAUTH"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := redisConfig(r.Addr)
			cfg.Password = tt.password
			err := pingRedis(t, cfg)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("ping: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("ping: got %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestRedisACLUserAndDB(t *testing.T) {
	t.Parallel()
	r := testenv.StartRedis(t, testenv.WithRedisArgs("--user", "alice", "on", ">pw", "~*", "&*", "+@all"))
	cfg := redisConfig(r.Addr)
	cfg.Username, cfg.Password, cfg.DB, cfg.PoolSize = "alice", "pw", 5, 3

	c, err := connect.Redis(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := testenv.Ctx(t, 10*time.Second)
	who, err := c.Do(ctx, "ACL", "WHOAMI").Text()
	if err != nil || who != "alice" {
		t.Fatalf("ACL WHOAMI = %q, %v; want alice", who, err)
	}
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("set: %v", err)
	}
	if got := c.(*redis.Client).Options().PoolSize; got != 3 {
		t.Errorf("pool size = %d, want 3", got)
	}

	// The key landed in database 5.
	raw := r.Client(t)
	if err := raw.Do(ctx, "SELECT", "5").Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := raw.Exists(ctx, "k").Result(); err != nil || n != 1 {
		t.Errorf("key k in db 5: exists = %d, %v", n, err)
	}

	cfg.Password = "wrong"
	if err := pingRedis(t, cfg); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("wrong ACL password: got %v, want WRONGPASS", err)
	}
}

func TestRedisTLS(t *testing.T) {
	t.Parallel()
	pki := testenv.NewPKI(t)
	tlsPort := testenv.FreePort(t)
	testenv.StartRedis(t, testenv.WithRedisArgs(
		"--tls-port", strconv.Itoa(tlsPort),
		"--tls-cert-file", pki.ServerCert,
		"--tls-key-file", pki.ServerKey,
		"--tls-ca-cert-file", pki.CA,
		"--tls-auth-clients", "yes",
	))
	addr := "127.0.0.1:" + strconv.Itoa(tlsPort)

	mutual := config.TLSConfig{Enabled: true, CAFile: pki.CA, CertFile: pki.ClientCert, KeyFile: pki.ClientKey}
	tests := []struct {
		name    string
		addr    string
		tls     config.TLSConfig
		wantErr bool
	}{
		{"mutual TLS", addr, mutual, false},
		{"server name override", addr, withServerName(mutual, "localhost"), false},
		{"wrong server name", addr, withServerName(mutual, "redis.example"), true},
		{"no client certificate", addr, config.TLSConfig{Enabled: true, CAFile: pki.CA}, true},
		{"unknown CA", addr, config.TLSConfig{Enabled: true, CertFile: pki.ClientCert, KeyFile: pki.ClientKey}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := redisConfig(tt.addr)
			cfg.TLS = tt.tls
			err := pingRedis(t, cfg)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ping: got %v, want error %v", err, tt.wantErr)
			}
		})
	}
}

func withServerName(c config.TLSConfig, name string) config.TLSConfig {
	c.ServerName = name
	return c
}

func TestEtcd(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t)
	cfg := config.Default().Etcd
	cfg.Endpoints = []string{e.Endpoint}

	c, err := connect.Etcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := testenv.Ctx(t, 10*time.Second)
	if _, err := c.Put(ctx, "/hourglass/test", "v"); err != nil {
		t.Fatalf("put: %v", err)
	}
	resp, err := c.Get(ctx, "/hourglass/test")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("get: %v, %v", resp, err)
	}
}

func TestEtcdAuth(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t)
	admin := e.Client(t)
	ctx := testenv.Ctx(t, 20*time.Second)
	if _, err := admin.UserAdd(ctx, "root", "rootpw"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}

	put := func(user, password string) error {
		cfg := config.Default().Etcd
		cfg.Endpoints = []string{e.Endpoint}
		cfg.Username, cfg.Password = user, password
		c, err := connect.Etcd(cfg)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Put(ctx, "/hourglass/auth", "v")
		return err
	}
	if err := put("root", "rootpw"); err != nil {
		t.Fatalf("put as root: %v", err)
	}
	if err := put("root", "wrong"); err == nil {
		t.Fatal("put with a wrong password succeeded")
	}
	if err := put("", ""); err == nil {
		t.Fatal("put without credentials succeeded")
	}
}

func TestTLSConfig(t *testing.T) {
	t.Parallel()
	pki := testenv.NewPKI(t)
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing-ca.pem")

	tests := []struct {
		name     string
		cfg      config.TLSConfig
		wantErr  []string // fragments; nil means success
		notExist bool
	}{
		{"missing CA file", config.TLSConfig{Enabled: true, CAFile: missing}, []string{"ca_file", missing}, true},
		{"CA file without certificates", config.TLSConfig{Enabled: true, CAFile: garbage}, []string{"ca_file", garbage, "holds no PEM certificate"}, false},
		{"missing cert file", config.TLSConfig{Enabled: true, CertFile: missing, KeyFile: pki.ClientKey}, []string{"cert_file", missing}, true},
		{"bad key file", config.TLSConfig{Enabled: true, CertFile: pki.ClientCert, KeyFile: garbage}, []string{"key_file", garbage}, false},
		{"cert without key", config.TLSConfig{Enabled: true, CertFile: pki.ClientCert}, []string{"set together"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := connect.TLS(tt.cfg)
			checkErr(t, "TLS", err, append([]string{"connect: config: tls."}, tt.wantErr...), tt.notExist)
			// Both client constructors report the same problem.
			_, err = connect.Redis(config.RedisConfig{Addr: "127.0.0.1:1", TLS: tt.cfg})
			checkErr(t, "Redis", err, append([]string{"connect: config: redis.tls."}, tt.wantErr...), tt.notExist)
			_, err = connect.Etcd(config.EtcdConfig{Endpoints: []string{"https://127.0.0.1:1"}, TLS: tt.cfg})
			checkErr(t, "Etcd", err, append([]string{"connect: config: etcd.tls."}, tt.wantErr...), tt.notExist)
		})
	}

	if tc, err := connect.TLS(config.TLSConfig{CAFile: pki.CA}); tc != nil || err != nil {
		t.Errorf("disabled TLS: got %v, %v; want nil, nil", tc, err)
	}
	tc, err := connect.TLS(config.TLSConfig{
		Enabled: true, CAFile: pki.CA, CertFile: pki.ClientCert, KeyFile: pki.ClientKey,
		ServerName: "redis.internal", InsecureSkipVerify: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if tc.RootCAs == nil || len(tc.Certificates) != 1 || tc.ServerName != "redis.internal" ||
		!tc.InsecureSkipVerify || tc.MinVersion != tls.VersionTLS12 {
		t.Errorf("unexpected tls.Config: %+v", tc)
	}
}

func checkErr(t *testing.T, what string, err error, fragments []string, notExist bool) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: got no error, want one containing %q", what, fragments)
	}
	for _, f := range fragments {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("%s: error %q does not contain %q", what, err, f)
		}
	}
	if notExist && !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s: error %q does not wrap os.ErrNotExist", what, err)
	}
}

// go-redis's own log lines (here: its pool failing to dial) come out of
// the binary's logger, as JSON when log.format is json, not as go-redis's
// plain-text lines on stderr.
func TestRedisLogsGoThroughLogger(t *testing.T) {
	t.Parallel()
	var buf testenv.Buffer
	connect.Logger(config.LogConfig{Level: "info", Format: "json"}, "test", &buf)
	cfg := redisConfig("127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))) // nothing listens
	cfg.DialTimeout = 200 * time.Millisecond
	if err := pingRedis(t, cfg); err == nil {
		t.Fatal("ping of a closed port succeeded")
	}
	testenv.WaitFor(t, 10*time.Second, "go-redis's dial failure logged as JSON", func() (bool, string) {
		for _, line := range strings.Split(buf.String(), "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) == nil && rec["@module"] == "test.redis" &&
				strings.Contains(fmt.Sprint(rec["@message"]), "failed to dial") {
				return true, ""
			}
		}
		return false, buf.String()
	})
}

// TestClusterFollowsAPromotion: after a cluster primary is SIGKILLed and
// its replica promoted, a client from Redis (mode cluster) writes to the
// slot again within a few reload periods, by itself: go-redis would keep
// sending to the dead primary until its default 60 s reload.
func TestClusterFollowsAPromotion(t *testing.T) {
	t.Parallel()
	rc := testenv.StartRedisCluster(t, 3, 1)
	cfg := config.Default().Redis
	cfg.Mode, cfg.Addr, cfg.Addrs = config.RedisCluster, "", rc.Addrs()
	c, err := connect.Redis(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := testenv.Ctx(t, time.Minute)
	const key = "{hourglass:0}:probe"
	if err := c.Set(ctx, key, "before", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, "WAIT", 1, 1000).Err(); err != nil {
		t.Fatal(err)
	}
	victim := rc.PrimaryFor(key)
	victim.Kill()
	killed := time.Now()
	testenv.WaitFor(t, 10*connect.ClusterStateReload+10*time.Second, "a write to the slot after the promotion", func() (bool, string) {
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		err := c.Set(wctx, key, "after", 0).Err()
		return err == nil, fmt.Sprint(err)
	})
	t.Logf("writes to the slot of a SIGKILLed primary succeeded again %s after the kill", time.Since(killed).Round(time.Millisecond))
	if v, err := c.Get(ctx, key).Result(); err != nil || v != "after" {
		t.Fatalf("read back: %q %v", v, err)
	}
	// Bring the node back (it rejoins as a replica): go-redis's pool keeps
	// a goroutine re-dialling a dead node, up to a second past Close.
	victim.Restart()
}
