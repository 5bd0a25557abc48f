package testenv

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hourglass-sched/hourglass/internal/localrun"
)

// Etcd is a single-member etcd cluster started for one test.
type Etcd struct {
	*Process
	// Endpoint is the client URL, http://127.0.0.1:port.
	Endpoint string
	// Dir is the member's data directory.
	Dir string
	srv *localrun.Etcd
}

// StartEtcd starts etcd on free loopback ports with its data in a
// temporary directory, waits until /health answers and stops it when the
// test ends.
func StartEtcd(t testing.TB) *Etcd {
	t.Helper()
	LookBinary(t, "etcd")
	srv, err := localrun.StartEtcd(t.TempDir())
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return &Etcd{Process: watch(t, srv.Proc), Endpoint: srv.Endpoint, Dir: srv.Dir, srv: srv}
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
	if err := e.srv.Restart(); err != nil {
		e.t.Fatal(err)
	}
}
