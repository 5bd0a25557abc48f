package testenv

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Etcd is a single-member etcd cluster started for one test.
type Etcd struct {
	*Process
	// Endpoint is the client URL, http://127.0.0.1:port.
	Endpoint string
	// Dir is the member's data directory.
	Dir string
}

// StartEtcd starts etcd on free loopback ports with its data in a
// temporary directory, waits until /health answers and stops it when the
// test ends.
func StartEtcd(t testing.TB) *Etcd {
	t.Helper()
	bin := LookBinary(t, "etcd")
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		dir := t.TempDir()
		cport, pport := FreePort(t), FreePort(t)
		if cport == pport {
			continue
		}
		client := fmt.Sprintf("http://127.0.0.1:%d", cport)
		peer := fmt.Sprintf("http://127.0.0.1:%d", pport)
		args := []string{
			"--name", "hg-test",
			"--data-dir", dir,
			"--listen-client-urls", client,
			"--advertise-client-urls", client,
			"--listen-peer-urls", peer,
			"--initial-advertise-peer-urls", peer,
			"--initial-cluster", "hg-test=" + peer,
			"--initial-cluster-state", "new",
			"--log-level", "warn",
			"--logger", "zap",
		}
		p := StartProcess(t, fmt.Sprintf("etcd-%d", cport), bin, args, []string{"ETCD_UNSUPPORTED_ARCH=" + goarch()})
		e := &Etcd{Process: p, Endpoint: client, Dir: dir}
		if lastErr = waitReady(p, e.health); lastErr == nil {
			return e
		}
		p.stop()
	}
	t.Fatalf("testenv: etcd did not start: %v", lastErr)
	return nil
}

func (e *Etcd) health() error {
	c := http.Client{Timeout: 500 * time.Millisecond}
	resp, err := c.Get(e.Endpoint + "/health")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%w: /health status %d", errNotReady, resp.StatusCode)
	}
	return nil
}

// Client returns an etcd client for the member, closed at cleanup.
func (e *Etcd) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint}, DialTimeout: 2 * time.Second})
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
	e.Process.Restart()
	if err := waitReady(e.Process, e.health); err != nil {
		e.t.Fatalf("testenv: etcd restart: %v", err)
	}
}

// Ctx returns a context that ends after d and is cancelled at cleanup.
func Ctx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
