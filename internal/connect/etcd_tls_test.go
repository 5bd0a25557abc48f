package connect_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/config"
	"github.com/hourglass-sched/hourglass/internal/connect"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// etcdFailBudget bounds a call that cannot succeed: it must give up by
// then instead of hanging.
const etcdFailBudget = 3 * time.Second

// TestEtcdTLS runs a real TLS handshake with an etcd member that requires
// client certificates (--client-cert-auth): connect.Etcd with the test
// CA and a client certificate writes and reads a key; a client without a
// certificate, one whose certificate another CA signed, and one that
// trusts another CA fail within a bounded time: the client's Put at its
// context's deadline, and a handshake with the same TLS configuration
// with an error that names the TLS problem.
func TestEtcdTLS(t *testing.T) {
	t.Parallel()
	pki := testenv.NewPKI(t)
	other := testenv.NewPKI(t) // a CA etcd does not know, and its certificates
	e := testenv.StartEtcd(t, testenv.WithEtcdTLS(pki.CA, pki.ServerCert, pki.ServerKey))
	if !strings.HasPrefix(e.Endpoint, "https://127.0.0.1:") {
		t.Fatalf("endpoint %q, want https://127.0.0.1:port", e.Endpoint)
	}

	t.Run("mutual TLS", func(t *testing.T) {
		c, err := connect.Etcd(etcdTLSConfig(e.Endpoint, config.TLSConfig{
			Enabled: true, CAFile: pki.CA, CertFile: pki.ClientCert, KeyFile: pki.ClientKey,
		}))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx := testenv.Ctx(t, 10*time.Second)
		if _, err := c.Put(ctx, "/hourglass/tls", "v"); err != nil {
			t.Fatalf("put: %v", err)
		}
		resp, err := c.Get(ctx, "/hourglass/tls")
		if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
			t.Fatalf("get: %v, %v", resp, err)
		}
		// The bare handshake that the failure cases below use is
		// accepted with these files.
		if err := handshake(t, e.Endpoint, config.TLSConfig{
			Enabled: true, CAFile: pki.CA, CertFile: pki.ClientCert, KeyFile: pki.ClientKey,
		}); err != nil {
			t.Fatalf("handshake with a valid client certificate: %v", err)
		}
		// The harness's own client reaches the member too and sees the
		// key, also after a SIGKILL and a restart on the same TLS port
		// and data.
		hc := e.Client(t)
		resp, err = hc.Get(ctx, "/hourglass/tls")
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("harness client get: %v, %v", resp, err)
		}
		e.Kill()
		e.Restart()
		resp, err = c.Get(ctx, "/hourglass/tls")
		if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
			t.Fatalf("get after restart: %v, %v", resp, err)
		}
	})

	fails := []struct {
		name string
		tls  config.TLSConfig
		want []string // fragments of the error, any one of them
	}{
		{"no client certificate",
			config.TLSConfig{Enabled: true, CAFile: pki.CA},
			[]string{"certificate required", "bad certificate"}},
		{"client certificate from another CA",
			config.TLSConfig{Enabled: true, CAFile: pki.CA, CertFile: other.ClientCert, KeyFile: other.ClientKey},
			[]string{"unknown certificate authority", "bad certificate"}},
		{"server from an untrusted CA",
			config.TLSConfig{Enabled: true, CAFile: other.CA, CertFile: pki.ClientCert, KeyFile: pki.ClientKey},
			[]string{"x509: certificate signed by unknown authority"}},
	}
	for _, tt := range fails {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel() // each waits out its budget; the member is up for good now
			c, err := connect.Etcd(etcdTLSConfig(e.Endpoint, tt.tls))
			if err != nil {
				t.Fatalf("connect.Etcd: %v (the files are valid; the handshake is what fails)", err)
			}
			defer c.Close()

			// The client's own calls wait for a ready connection
			// (clientv3's default WaitForReady): they end at their
			// context's deadline, not later. (Their error is then the
			// deadline's, "context deadline exceeded", which does not
			// name the TLS problem; the handshake below does.)
			ctx, cancel := context.WithTimeout(context.Background(), etcdFailBudget)
			defer cancel()
			start := time.Now()
			_, err = c.Put(ctx, "/hourglass/tls", "v")
			took := time.Since(start)
			if err == nil {
				t.Fatal("put succeeded")
			}
			if took > etcdFailBudget+time.Second {
				t.Errorf("put failed after %s, past its %s deadline", took, etcdFailBudget)
			}
			t.Logf("client put failed after %s: %v", took.Round(time.Millisecond), err)

			// The cause is the handshake's: the TLS configuration that
			// connect builds gets an error that names it, in bounded
			// time.
			start = time.Now()
			err = handshake(t, e.Endpoint, tt.tls)
			took = time.Since(start)
			t.Logf("handshake failed after %s: %v", took.Round(time.Millisecond), err)
			if err == nil || !containsAny(err.Error(), tt.want) {
				t.Errorf("handshake: %v, want an error naming one of %q", err, tt.want)
			}
			if took > etcdFailBudget {
				t.Errorf("handshake failed after %s, past its %s deadline", took, etcdFailBudget)
			}
		})
	}
}

// etcdTLSConfig returns the default etcd section for endpoint with tc
// and a short dial timeout.
func etcdTLSConfig(endpoint string, tc config.TLSConfig) config.EtcdConfig {
	cfg := config.Default().Etcd
	cfg.Endpoints = []string{endpoint}
	cfg.TLS = tc
	cfg.DialTimeout = 2 * time.Second
	return cfg
}

func handshake(t *testing.T, endpoint string, tc config.TLSConfig) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), etcdFailBudget)
	defer cancel()
	return connect.CheckEtcdTLS(ctx, config.EtcdConfig{Endpoints: []string{endpoint}, TLS: tc})
}

func containsAny(s string, fragments []string) bool {
	for _, f := range fragments {
		if strings.Contains(s, f) {
			return true
		}
	}
	return false
}

// TestCheckEtcdTLSIgnoresUnreachable: an endpoint that refuses the
// connection is not a TLS failure (the scheduler must not blame TLS for
// a member that is down).
func TestCheckEtcdTLSIgnoresUnreachable(t *testing.T) {
	t.Parallel()
	pki := testenv.NewPKI(t)
	ctx, cancel := context.WithTimeout(context.Background(), etcdFailBudget)
	defer cancel()
	down := fmt.Sprintf("https://127.0.0.1:%d", testenv.FreePort(t))
	if err := connect.CheckEtcdTLS(ctx, config.EtcdConfig{Endpoints: []string{down},
		TLS: config.TLSConfig{Enabled: true, CAFile: pki.CA}}); err != nil {
		t.Fatalf("a refused connection reported as a TLS failure: %v", err)
	}
}
