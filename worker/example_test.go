package worker_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/hourglasstest"
	"github.com/hourglass-sched/hourglass/scheduler"
	"github.com/hourglass-sched/hourglass/worker"
)

// Consume the "orders" queue: the first attempt fails and is retried
// 10 ms later, the second succeeds. A handler's error is retried with
// the queue's backoff (RetryAfter chooses the delay), up to its max
// retries; worker.NoRetry dead-letters the task at once. Cancelling
// Run's context stops fetching and lets running handlers finish.
func Example() {
	// Redis, etcd and a scheduler replica for the example; in production
	// they run already (package scheduler or cmd/scheduler).
	env, err := hourglasstest.New(context.Background(), hourglasstest.Options{
		Configure: func(c *scheduler.Config) { c.Queues["orders"] = scheduler.DefaultQueue() },
	})
	if err != nil {
		panic(err)
	}
	defer env.Close()

	w, err := worker.New(env.Redis(), env.WorkerConfig()) // the deployment's namespace and shards
	if err != nil {
		panic(err)
	}
	closed := make(chan struct{})
	err = w.Handle("orders", func(ctx context.Context, t *worker.Task) error {
		if t.Attempt == 1 {
			fmt.Printf("attempt %d of %s: database busy\n", t.Attempt, t.ID)
			return worker.RetryAfter(10*time.Millisecond, errors.New("database busy"))
		}
		fmt.Printf("attempt %d of %s: order closed\n", t.Attempt, t.ID)
		close(closed)
		return nil
	}, worker.DefaultQueueOptions())
	if err != nil {
		panic(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	stopped := make(chan error)
	go func() { stopped <- w.Run(ctx) }()

	c, err := env.NewClient()
	if err != nil {
		panic(err)
	}
	if _, err := c.Enqueue(ctx, client.Task{ID: "close-order-1234", Queue: "orders", Delay: 50 * time.Millisecond}); err != nil {
		panic(err)
	}
	<-closed
	stop()
	fmt.Println("worker stopped:", <-stopped)
	// Output:
	// attempt 1 of close-order-1234: database busy
	// attempt 2 of close-order-1234: order closed
	// worker stopped: <nil>
}
