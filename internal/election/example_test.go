package election_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hourglass-sched/hourglass/internal/election"
)

// A scheduler replica runs one Manager; the RunFunc does a shard's work
// until its ctx ends, passing the epoch to every fenced Redis call.
func ExampleManager() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://127.0.0.1:2379"}, DialTimeout: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	m, err := election.New(cli, election.Config{
		Prefix:    "/hourglass/",
		ReplicaID: "scheduler-1",
		Shards:    16,
	}, func(ctx context.Context, shard int, epoch int64) {
		// Move due tasks of shard with epoch until ctx is done.
		<-ctx.Done()
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := m.Run(ctx); err != nil { // returns after a graceful hand-over
		log.Fatal(err)
	}
}
