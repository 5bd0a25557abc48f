package worker_test

import (
	"context"
	"fmt"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/hourglasstest"
	"github.com/hourglass-sched/hourglass/worker"
)

// closeOrder is the payload of the tasks, as producers enqueue it
// (client.EnqueueOf).
type closeOrder struct {
	OrderID int `json:"order_id"`
}

// A typed handler: each payload is decoded from JSON into a closeOrder
// before the handler runs. A payload that does not decode is
// dead-lettered at once with the decode error (no retries).
func ExampleTyped() {
	env, err := hourglasstest.New(context.Background(), hourglasstest.Options{}) // queue "default"
	if err != nil {
		panic(err)
	}
	defer env.Close()

	w, err := worker.New(env.Redis(), env.WorkerConfig())
	if err != nil {
		panic(err)
	}
	done := make(chan struct{})
	err = w.Handle("default", worker.Typed(func(ctx context.Context, t *worker.Task, o closeOrder) error {
		fmt.Println("closing order", o.OrderID)
		close(done)
		return nil
	}), worker.DefaultQueueOptions())
	if err != nil {
		panic(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	env.RunWorker(w) // until env.Close

	c, err := env.NewClient()
	if err != nil {
		panic(err)
	}
	if _, err := client.EnqueueOf(ctx, c, client.Task{Queue: "default"}, closeOrder{OrderID: 1234}); err != nil {
		panic(err)
	}
	<-done
	// Output: closing order 1234
}
