package client_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/client"
)

// Enqueue a task that closes an unpaid order in 30 minutes, once: a second
// enqueue of the same id is reported as a duplicate and changes nothing.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	c, err := client.New(rdb, client.Config{Namespace: "hourglass", Shards: 16})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	res, err := c.Enqueue(ctx, client.Task{
		ID:      "close-order-1234",
		Queue:   "orders",
		Payload: []byte(`{"order":1234}`),
		Delay:   30 * time.Minute,
	})
	switch {
	case errors.Is(err, client.ErrDuplicate):
		fmt.Println("already scheduled for", res.Due)
	case err != nil:
		panic(err)
	default:
		fmt.Println("due at", res.Due)
	}
}
