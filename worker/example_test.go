package worker_test

import (
	"context"
	"encoding/json"
	"os"
	"os/signal"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/worker"
)

// Consume the "orders" queue: close unpaid orders. A malformed payload is
// dead-lettered at once; other errors are retried with backoff; SIGINT
// stops fetching and lets running handlers finish.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	cfg := worker.DefaultConfig() // the worker binary's defaults
	cfg.Namespace, cfg.Shards, cfg.ShutdownGrace = "hourglass", 16, 10*time.Second
	w, err := worker.New(rdb, cfg)
	if err != nil {
		panic(err)
	}
	opts := worker.DefaultQueueOptions()
	opts.Concurrency = 20
	err = w.Handle("orders", func(ctx context.Context, t *worker.Task) error {
		var order struct{ ID int }
		if err := json.Unmarshal(t.Payload, &order); err != nil {
			return worker.NoRetry(err)
		}
		return closeIfUnpaid(ctx, order.ID)
	}, opts)
	if err != nil {
		panic(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	_ = w.Run(ctx)
}

func closeIfUnpaid(context.Context, int) error { return nil }
