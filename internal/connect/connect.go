// Package connect builds the Redis and etcd clients of Hourglass from
// configuration. It is the only package that turns a config section into
// a client, so connection settings (credentials, TLS, timeouts) are
// applied the same way in every binary.
//
// The constructors do not contact the servers: go-redis dials on first
// use and etcd's client connects in the background. Ping Redis or make a
// call to etcd with a context to find out whether a server is reachable.
package connect

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/hourglass-sched/hourglass/internal/config"
)

// Redis returns a client for the Redis topology described by cfg: a
// standalone server, a primary found through Sentinels (followed across
// failovers), or a Redis Cluster. The caller closes it.
func Redis(cfg config.RedisConfig) (redis.UniversalClient, error) { return RedisAs(cfg, "") }

// RedisAs is Redis with every connection named name (CLIENT SETNAME on
// connect; "" names none): a scheduler's or worker's procs.ConnName,
// by which the process registry tells it is alive. A server that refuses
// the name (an ACL user without "client|setname") leaves the connection
// unnamed, and working: the process is then not listed as alive.
func RedisAs(cfg config.RedisConfig, name string) (redis.UniversalClient, error) {
	tc, err := tlsConfig("redis.tls", cfg.TLS)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err) // it names the key, redis.tls.*
	}
	o := &redis.UniversalOptions{
		Username:    cfg.Username,
		Password:    cfg.Password,
		DB:          cfg.DB,
		PoolSize:    cfg.PoolSize,
		DialTimeout: cfg.DialTimeout,
		TLSConfig:   tc,
		// A call's ctx deadline bounds its reads and writes (go-redis
		// otherwise waits out its own read timeout, and retries, past it):
		// a health check with a 1 s budget answers within 1 s when Redis
		// stops answering.
		ContextTimeoutEnabled: true,
		// Maintenance notifications serve managed Redis (Enterprise,
		// Cloud) during upgrades. Hourglass talks to a self-run server, so
		// skip the extra handshake and its effect on pool sizing.
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
	if name != "" {
		o.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
			_ = cn.ClientSetName(ctx, name).Err() // refused: unnamed, not broken
			return nil
		}
	}
	switch cfg.Mode {
	case config.RedisSentinel:
		o.Addrs = slices.Clone(cfg.Addrs)
		o.MasterName = cfg.MasterName
		o.SentinelUsername = cfg.SentinelUsername
		o.SentinelPassword = cfg.SentinelPassword
		return redis.NewFailoverClient(o.Failover()), nil
	case config.RedisCluster:
		o.Addrs = slices.Clone(cfg.Addrs)
		co := o.Cluster()
		// go-redis follows MOVED and ASK at once, but a killed primary
		// answers nothing: the client learns of its replica's promotion
		// only at its periodic reload (60 s by default).
		co.ClusterStateReloadInterval = ClusterStateReload
		return redis.NewClusterClient(co), nil
	case config.RedisStandalone, "":
		o.Addrs = []string{cfg.Addr}
		return redis.NewClient(o.Simple()), nil
	}
	return nil, fmt.Errorf("connect: redis: unknown mode %q", cfg.Mode)
}

// ClusterStateReload is how often a cluster client re-reads the slot map:
// about how long after a replica's promotion the processes write to it.
// One CLUSTER SLOTS per process each time.
const ClusterStateReload = 2 * time.Second

// Etcd returns a client for the etcd cluster described by cfg. The
// client logs nothing (its zap logger is a no-op): Hourglass logs what
// matters through hclog. The caller closes it.
func Etcd(cfg config.EtcdConfig) (*clientv3.Client, error) {
	tc, err := tlsConfig("etcd.tls", cfg.TLS)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err) // it names the key, etcd.tls.*
	}
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   slices.Clone(cfg.Endpoints),
		Username:    cfg.Username,
		Password:    cfg.Password,
		TLS:         tc,
		DialTimeout: cfg.DialTimeout,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("connect: etcd: %w", err)
	}
	return c, nil
}

// CheckEtcdTLS completes a TLS handshake with every https endpoint of
// cfg at once, waiting up to a fraction of ctx's time for the server to
// reject the client certificate, and returns the TLS failures (an
// unknown authority, a bad or missing client certificate), each naming
// its endpoint. The etcd client reports those only as "context deadline
// exceeded". An endpoint that accepts the handshake, or that cannot be
// reached at all (down, refused, timed out: not a TLS matter), passes;
// endpoints without TLS are skipped.
func CheckEtcdTLS(ctx context.Context, cfg config.EtcdConfig) error {
	tc, err := tlsConfig("etcd.tls", cfg.TLS)
	if err != nil || tc == nil {
		return err
	}
	errs := make([]error, len(cfg.Endpoints))
	var wg sync.WaitGroup
	for i, ep := range cfg.Endpoints {
		u, err := url.Parse(ep)
		if err != nil || u.Scheme != "https" {
			continue
		}
		wg.Go(func() {
			if err := tlsHandshake(ctx, u.Host, tc); isTLSFailure(err) {
				errs[i] = fmt.Errorf("connect: etcd %s: TLS: %w", ep, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// isTLSFailure reports whether err is the TLS layer's verdict rather than
// a failure to reach the server.
func isTLSFailure(err error) bool {
	var ve *tls.CertificateVerificationError
	return err != nil && (errors.As(err, &ve) || strings.Contains(err.Error(), "tls:") || strings.Contains(err.Error(), "x509:"))
}

// tlsHandshake dials addr with tc and reads once: a server that rejects
// the client's certificate says so in an alert after the handshake (TLS
// 1.3); one that accepts waits for a request, and the read times out.
func tlsHandshake(ctx context.Context, addr string, tc *tls.Config) error {
	d := tls.Dialer{Config: tc}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	wait := 500 * time.Millisecond
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl)/2)
	}
	if err := conn.SetReadDeadline(time.Now().Add(wait)); err != nil {
		return err
	}
	_, err = conn.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return nil
	}
	return err
}

// TLS returns the client TLS configuration described by c, or nil when
// c.Enabled is false. It loads the CA and client certificate files now
// (config.LoadTLS; config validation did too), so a missing or bad file
// is reported with its key and path. TLS 1.2 is the minimum version.
func TLS(c config.TLSConfig) (*tls.Config, error) {
	tc, err := tlsConfig("tls", c)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return tc, nil
}

// tlsConfig is TLS for the section at key prefix ("redis.tls").
func tlsConfig(prefix string, c config.TLSConfig) (*tls.Config, error) {
	if !c.Enabled {
		return nil, nil
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return nil, &config.FieldError{Key: prefix + ".cert_file", Msg: "cert_file and key_file must be set together"}
	}
	pool, certs, err := config.LoadTLS(prefix, c)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         c.ServerName,
		InsecureSkipVerify: c.InsecureSkipVerify, // opt-in, documented as for tests only
		RootCAs:            pool,
		Certificates:       certs,
	}, nil
}

// Logger returns the binary's root logger as the log section configures
// it: level, text or JSON, on w. go-redis's own lines (a failed dial of
// its pool, ...) go through it too, at Warn under the name "redis", so
// that they follow log.format; go-redis has one logger per process.
func Logger(cfg config.LogConfig, name string, w io.Writer) hclog.Logger {
	log := hclog.New(&hclog.LoggerOptions{
		Name:       name,
		Level:      hclog.LevelFromString(cfg.Level),
		JSONFormat: cfg.Format == "json",
		Output:     w,
	})
	redis.SetLogger(redisLogger{log.Named("redis")})
	return log
}

// redisLogger is go-redis's logger on hclog.
type redisLogger struct{ log hclog.Logger }

// Printf logs one go-redis line at Warn.
func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.Warn(strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: "))
}
