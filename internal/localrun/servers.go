package localrun

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// startTimeout bounds how long a server may take to answer.
const startTimeout = 20 * time.Second

// Redis is a redis-server on a loopback port.
type Redis struct {
	*Proc
	// Addr is host:port.
	Addr string
	// Dir holds the server's data files.
	Dir string
}

// StartRedis starts redis-server with its data in dir, no persistence
// unless extra arguments ask for it, and waits until it answers PING.
// It retries on another port if the chosen one was taken meanwhile.
func StartRedis(dir string, extra ...string) (*Redis, error) {
	bin, err := Look("redis-server")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		args := append([]string{
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
			"--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", "",
		}, extra...)
		p, err := Start(fmt.Sprintf("redis-%d", port), bin, args, nil, filepath.Join(dir, fmt.Sprintf("redis-%d.log", port)))
		if err != nil {
			return nil, err
		}
		r := &Redis{Proc: p, Addr: fmt.Sprintf("127.0.0.1:%d", port), Dir: dir}
		if lastErr = p.WaitReady(startTimeout, r.Ping); lastErr == nil {
			return r, nil
		}
		p.Stop(time.Second)
	}
	return nil, lastErr
}

// Ping reports whether the server answers (a NOAUTH reply counts as up).
func (r *Redis) Ping() error {
	c := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err := c.Ping(ctx).Err()
	if err != nil && err.Error() == "NOAUTH Authentication required." {
		return nil
	}
	return err
}

// Restart restarts a stopped server on the same port and data directory.
func (r *Redis) Restart() error { return r.RestartWith() }

// RestartWith is Restart with extra redis-server arguments for this
// incarnation (a later one wins over an earlier one of the same name),
// for example "--replicaof", host, port.
func (r *Redis) RestartWith(extra ...string) error {
	if err := r.Proc.RestartWith(extra...); err != nil {
		return err
	}
	return r.WaitReady(startTimeout, r.Ping)
}

// Etcd is a single-member etcd cluster on loopback ports.
type Etcd struct {
	*Proc
	// Endpoint is the client URL, http://127.0.0.1:port (https:// with
	// TLS).
	Endpoint string
	// Dir is the member's data directory.
	Dir string
	// client is the /health probe's TLS configuration (nil: plain).
	client *tls.Config
}

// EtcdTLS serves a member's client port over TLS and requires client
// certificates (--client-cert-auth); peer traffic stays plain.
type EtcdTLS struct {
	CAFile, CertFile, KeyFile string
	// Client is the TLS configuration of the /health probe: it must
	// trust CAFile and present a certificate the member accepts.
	Client *tls.Config
}

// StartEtcd starts etcd with its data under dir and waits until /health
// answers.
func StartEtcd(dir string) (*Etcd, error) { return StartEtcdTLS(dir, nil) }

// StartEtcdTLS is StartEtcd with the client port over TLS when t is not
// nil.
func StartEtcdTLS(dir string, t *EtcdTLS) (*Etcd, error) {
	bin, err := Look("etcd")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		cport, err := FreePort()
		if err != nil {
			return nil, err
		}
		pport, err := FreePort()
		if err != nil {
			return nil, err
		}
		if cport == pport {
			continue
		}
		scheme := "http"
		if t != nil {
			scheme = "https"
		}
		client := fmt.Sprintf("%s://127.0.0.1:%d", scheme, cport)
		peer := fmt.Sprintf("http://127.0.0.1:%d", pport)
		data := filepath.Join(dir, fmt.Sprintf("etcd-%d", cport))
		args := []string{
			"--name", "hourglass", "--data-dir", data,
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", "hourglass=" + peer, "--initial-cluster-state", "new",
			"--log-level", "warn", "--logger", "zap",
		}
		e := &Etcd{Endpoint: client, Dir: data}
		if t != nil {
			args = append(args, "--cert-file", t.CertFile, "--key-file", t.KeyFile, "--trusted-ca-file", t.CAFile, "--client-cert-auth")
			e.client = t.Client
		}
		p, err := Start(fmt.Sprintf("etcd-%d", cport), bin, args,
			[]string{"ETCD_UNSUPPORTED_ARCH=" + runtime.GOARCH}, filepath.Join(dir, fmt.Sprintf("etcd-%d.log", cport)))
		if err != nil {
			return nil, err
		}
		e.Proc = p
		if lastErr = p.WaitReady(startTimeout, e.Health); lastErr == nil {
			return e, nil
		}
		p.Stop(time.Second)
	}
	return nil, lastErr
}

// Health reports whether the member answers /health with 200.
func (e *Etcd) Health() error {
	c := http.Client{Timeout: 500 * time.Millisecond}
	if e.client != nil {
		// No keep-alive: no idle connection (and its goroutines)
		// outlives the probe.
		tr := &http.Transport{TLSClientConfig: e.client.Clone(), DisableKeepAlives: true}
		defer tr.CloseIdleConnections()
		c.Transport = tr
	}
	resp, err := c.Get(e.Endpoint + "/health")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("localrun: etcd /health status %d", resp.StatusCode)
	}
	return nil
}

// Restart restarts a stopped member with the same ports and data.
func (e *Etcd) Restart() error {
	if err := e.Proc.Restart(); err != nil {
		return err
	}
	return e.WaitReady(startTimeout, e.Health)
}
