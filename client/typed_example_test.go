package client_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/client"
)

// closeOrder is the payload of the "orders" queue's tasks, as its
// workers decode it (worker.Typed).
type closeOrder struct {
	OrderID int `json:"order_id"`
}

// Enqueue a typed payload: EnqueueOf encodes it with the client's codec,
// JSON unless Config.Codec says otherwise, and a worker.Typed handler of
// the queue decodes it into the same type.
func ExampleEnqueueOf() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	c, err := client.New(rdb, client.Config{Namespace: "hourglass", Shards: 16})
	if err != nil {
		panic(err)
	}
	res, err := client.EnqueueOf(context.Background(), c,
		client.Task{ID: "close-order-1234", Queue: "orders", Delay: 30 * time.Minute},
		closeOrder{OrderID: 1234})
	if err != nil {
		panic(err)
	}
	fmt.Println("due at", res.Due)
}
