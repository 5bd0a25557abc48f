package scheduler

import (
	"fmt"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestRegistryComesBackWhenTheControlChannelReconnects: with the periodic
// check an hour away, a Redis that lost its data and its pub/sub
// connections (as a restart without persistence does) is re-registered
// as soon as the control subscription is confirmed again, not at the
// next registryCheck.
func TestRegistryComesBackWhenTheControlChannelReconnects(t *testing.T) {
	t.Parallel()
	cfg, r, _ := replicaConfig(t, "reconnect")
	runReplica(t, cfg, func(s *Scheduler) { s.registryEvery = time.Hour })
	cli, err := client.New(r.RDB, client.Config{Namespace: cfg.Namespace, Shards: cfg.Shards})
	if err != nil {
		t.Fatal(err)
	}
	tctx := testenv.Ctx(t, 60*time.Second)
	testenv.WaitFor(t, 15*time.Second, "queue default registered", func() (bool, string) {
		_, err := cli.Enqueue(tctx, client.Task{Queue: "default", Delay: time.Hour})
		return err == nil, fmt.Sprint(err)
	})
	if err := r.RDB.FlushAll(tctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.RDB.Do(tctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "queue default registered again", func() (bool, string) {
		_, err := cli.Enqueue(tctx, client.Task{Queue: "default", Delay: time.Hour})
		return err == nil, fmt.Sprint(err)
	})
}
