package testenv

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hourglass-sched/hourglass/internal/localrun"
)

// Etcd is a single-member etcd cluster started for one test.
type Etcd struct {
	*Process
	// Endpoint is the client URL: http://127.0.0.1:port, or
	// https://127.0.0.1:port when the member was started WithEtcdTLS.
	Endpoint string
	// Dir is the member's data directory.
	Dir string
	srv *localrun.Etcd
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
// certificates.
func startEtcdTLS(t testing.TB, o etcdOptions) *Etcd {
	t.Helper()
	tc, err := harnessTLS(o)
	if err != nil {
		t.Fatalf("testenv: etcd TLS: %v", err)
	}
	srv, err := localrun.StartEtcdTLS(t.TempDir(), &localrun.EtcdTLS{CAFile: o.caFile, CertFile: o.certFile, KeyFile: o.keyFile, Client: tc})
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return &Etcd{Process: watch(t, srv.Proc), Endpoint: srv.Endpoint, Dir: srv.Dir, srv: srv, tls: tc}
}

// harnessTLS returns the client TLS configuration of the harness: it
// trusts caFile and presents certFile, which must allow client
// authentication. (It cannot call connect.TLS: connect's dependencies
// import packages whose in-package tests import testenv.)
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
	if err := e.srv.Restart(); err != nil {
		e.t.Fatal(err)
	}
}
