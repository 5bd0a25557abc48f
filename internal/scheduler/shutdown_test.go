package scheduler

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestShutdownWithRedisPausedIsBounded (issue 24, item 15d): a replica
// stopped while its Redis is paused (SIGSTOP: connections stay open,
// nothing answers) must not wait on its calls' timeouts. Its loops' calls
// end with their ctx; the shutdown returns within a bound that does not
// depend on Redis (the etcd revoke is bounded on its own).
func TestShutdownWithRedisPausedIsBounded(t *testing.T) {
	t.Parallel()
	cfg, r, _ := replicaConfig(t, "r1")
	// Every mover calls Redis ten times a second: some call is in flight
	// (blocked on the paused server) when the shutdown starts.
	cfg.Scheduler.SafetyRecheck = 100 * time.Millisecond
	logs := &testenv.Buffer{}
	s, err := New(&cfg, hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	url := "http://" + s.listener.Addr().String() + "/readyz"
	testenv.WaitFor(t, 20*time.Second, "ready, owning every shard", func() (bool, string) {
		code, body := get(t, url)
		return code == 200 && len(s.Owned()) == cfg.Shards, fmt.Sprint(code, body, len(s.Owned()))
	})
	r.Redis.Pause()
	t.Cleanup(r.Redis.Resume)
	time.Sleep(time.Second) // the movers' calls block on the paused server
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		took := time.Since(start)
		t.Logf("shutdown with Redis paused took %s", took)
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		// The client's read timeout is 3 s: a shutdown that waited on it
		// took 3-4.5 s. Not a timing bar: a bound well below that.
		if took > 2*time.Second {
			t.Fatalf("shutdown with Redis paused took %s: it waited on its calls' timeouts", took)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("shutdown with Redis paused still running after 20 s\n%s", logs.String())
	}
}
