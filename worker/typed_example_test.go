package worker_test

import (
	"context"
	"os"
	"os/signal"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/worker"
)

// closeOrder is the payload of the "orders" queue's tasks, as its
// producers enqueue it (client.EnqueueOf).
type closeOrder struct {
	OrderID int `json:"order_id"`
}

// Consume the "orders" queue with a typed handler: each payload is
// decoded from JSON into a closeOrder before the handler runs. A payload
// that does not decode is dead-lettered at once with the decode error;
// an error of the handler is retried with backoff.
func ExampleTyped() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	w, err := worker.New(rdb, worker.DefaultConfig())
	if err != nil {
		panic(err)
	}
	err = w.Handle("orders", worker.Typed(func(ctx context.Context, t *worker.Task, o closeOrder) error {
		return closeIfUnpaid(ctx, o.OrderID)
	}), worker.DefaultQueueOptions())
	if err != nil {
		panic(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := w.Run(ctx); err != nil {
		panic(err) // for one, no scheduler registered "orders" (worker.ErrNotRegistered)
	}
}
