package client_test

import (
	"context"
	"fmt"
	"time"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/hourglasstest"
)

// closeOrder is the payload of the tasks, as workers decode it
// (worker.Typed).
type closeOrder struct {
	OrderID int `json:"order_id"`
}

// Enqueue a typed payload: EnqueueOf encodes it with the client's codec,
// JSON unless Config.Codec says otherwise, and a worker.Typed handler of
// the queue decodes it into the same type.
func ExampleEnqueueOf() {
	env, err := hourglasstest.New(context.Background(), hourglasstest.Options{})
	if err != nil {
		panic(err)
	}
	defer env.Close()
	c, err := env.NewClient()
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	res, err := client.EnqueueOf(ctx, c, client.Task{ID: "close-order-1234", Queue: "default", Delay: 30 * time.Minute},
		closeOrder{OrderID: 1234})
	if err != nil {
		panic(err)
	}
	info, err := c.Lookup(ctx, res.ID)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s %s\n", info.ID, info.Payload)
	// Output: close-order-1234 {"order_id":1234}
}
