package testenv

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hourglass-sched/hourglass/internal/localrun"
)

// etcdStartTimeout bounds how long a TLS member may take to answer
// /health (localrun uses the same bound for plain members).
const etcdStartTimeout = 20 * time.Second

// Etcd is a single-member etcd cluster started for one test.
type Etcd struct {
	*Process
	// Endpoint is the client URL: http://127.0.0.1:port, or
	// https://127.0.0.1:port when the member was started WithEtcdTLS.
	Endpoint string
	// Dir is the member's data directory.
	Dir string
	srv *localrun.Etcd // plain members only
	// tls is the harness's client TLS configuration (nil for a plain
	// member): it trusts the test CA and presents the member's own
	// certificate.
	tls *tls.Config
}

// EtcdOption adjusts how StartEtcd starts the member.
type EtcdOption func(*etcdOptions)

type etcdOptions struct {
	caFile, certFile, keyFile string
}

// WithEtcdTLS serves etcd's client port over TLS and requires client
// certificates: etcd runs with --cert-file certFile, --key-file keyFile,
// --trusted-ca-file caFile and --client-cert-auth, and its client URL is
// https://127.0.0.1:port. Peer traffic stays plain http.
//
// certFile must be valid for 127.0.0.1 and carry both the serverAuth and
// clientAuth extended key usages (as etcd recommends for member
// certificates): the harness presents it as its own client certificate
// for the /health probe and for Client. StartEtcd fails the test at once
// if it lacks clientAuth.
func WithEtcdTLS(caFile, certFile, keyFile string) EtcdOption {
	return func(o *etcdOptions) { o.caFile, o.certFile, o.keyFile = caFile, certFile, keyFile }
}

// StartEtcd starts etcd on free loopback ports with its data in a
// temporary directory, waits until /health answers and stops it when the
// test ends.
func StartEtcd(t testing.TB, opts ...EtcdOption) *Etcd {
	t.Helper()
	LookBinary(t, "etcd")
	var o etcdOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.certFile != "" {
		return startEtcdTLS(t, o)
	}
	srv, err := localrun.StartEtcd(t.TempDir())
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return &Etcd{Process: watch(t, srv.Proc), Endpoint: srv.Endpoint, Dir: srv.Dir, srv: srv}
}

// startEtcdTLS starts a member whose client port requires TLS with client
// certificates, the way localrun.StartEtcd starts a plain one: it retries
// on other ports if the chosen ones were taken meanwhile.
func startEtcdTLS(t testing.TB, o etcdOptions) *Etcd {
	t.Helper()
	tc, err := harnessTLS(o)
	if err != nil {
		t.Fatalf("testenv: etcd TLS: %v", err)
	}
	bin := LookBinary(t, "etcd")
	dir := t.TempDir()
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		cport, pport := FreePort(t), FreePort(t)
		if cport == pport {
			continue
		}
		client := fmt.Sprintf("https://127.0.0.1:%d", cport)
		peer := fmt.Sprintf("http://127.0.0.1:%d", pport)
		data := filepath.Join(dir, fmt.Sprintf("etcd-%d", cport))
		args := []string{
			"--name", "hourglass", "--data-dir", data,
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", "hourglass=" + peer, "--initial-cluster-state", "new",
			"--cert-file", o.certFile, "--key-file", o.keyFile,
			"--trusted-ca-file", o.caFile, "--client-cert-auth",
			"--log-level", "warn", "--logger", "zap",
		}
		p, err := localrun.Start(fmt.Sprintf("etcd-%d", cport), bin, args,
			[]string{"ETCD_UNSUPPORTED_ARCH=" + runtime.GOARCH}, filepath.Join(dir, fmt.Sprintf("etcd-%d.log", cport)))
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		e := &Etcd{Endpoint: client, Dir: data, tls: tc}
		if lastErr = p.WaitReady(etcdStartTimeout, e.health); lastErr == nil {
			e.Process = watch(t, p)
			return e
		}
		p.Stop(time.Second)
	}
	t.Fatalf("testenv: %v", lastErr)
	return nil
}

// harnessTLS returns the client TLS configuration of the harness: it
// trusts caFile and presents certFile, which must allow client
// authentication.
func harnessTLS(o etcdOptions) (*tls.Config, error) {
	if o.caFile == "" || o.keyFile == "" {
		return nil, fmt.Errorf("CA, certificate and key files are all required (got %q, %q, %q)", o.caFile, o.certFile, o.keyFile)
	}
	caPEM, err := os.ReadFile(o.caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s: no PEM certificates", o.caFile)
	}
	pair, err := tls.LoadX509KeyPair(o.certFile, o.keyFile)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.certFile, err)
	}
	if len(leaf.ExtKeyUsage) > 0 && !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageClientAuth) &&
		!slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageAny) {
		return nil, fmt.Errorf("%s lacks the clientAuth extended key usage, which the harness needs to reach a member with --client-cert-auth", o.certFile)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, Certificates: []tls.Certificate{pair}}, nil
}

// health reports whether the member answers /health with 200, over TLS
// when the member uses it.
func (e *Etcd) health() error {
	if e.tls == nil {
		return e.srv.Health()
	}
	// No keep-alive: no idle connection (and its goroutines) outlives
	// the probe.
	tr := &http.Transport{TLSClientConfig: e.tls.Clone(), DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	c := http.Client{Timeout: 500 * time.Millisecond, Transport: tr}
	resp, err := c.Get(e.Endpoint + "/health")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("testenv: etcd /health status %d", resp.StatusCode)
	}
	return nil
}

// Client returns an etcd client for the member, closed at cleanup. For a
// member started WithEtcdTLS it trusts the test CA and presents the
// member's certificate.
func (e *Etcd) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cfg := clientv3.Config{Endpoints: []string{e.Endpoint}, DialTimeout: 2 * time.Second}
	if e.tls != nil {
		cfg.TLS = e.tls.Clone()
	}
	c, err := clientv3.New(cfg)
	if err != nil {
		t.Fatalf("testenv: etcd client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Restart restarts a stopped member with the same ports and data
// directory and waits until it is healthy.
func (e *Etcd) Restart() {
	e.t.Helper()
	if e.tls == nil {
		if err := e.srv.Restart(); err != nil {
			e.t.Fatal(err)
		}
		return
	}
	if err := e.Proc.Restart(); err != nil {
		e.t.Fatal(err)
	}
	if err := e.WaitReady(etcdStartTimeout, e.health); err != nil {
		e.t.Fatal(err)
	}
}
