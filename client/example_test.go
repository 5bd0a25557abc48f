package client_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/hourglasstest"
	"github.com/hourglass-sched/hourglass/scheduler"
)

// Enqueue a task that closes an unpaid order in 30 minutes, once: a second
// enqueue of the same id is reported as a duplicate and changes nothing.
func Example() {
	// Redis, etcd and a scheduler that registers the "orders" queue, for
	// the example; a program connects to its deployment's Redis.
	env, err := hourglasstest.New(context.Background(), hourglasstest.Options{
		Configure: func(c *scheduler.Config) { c.Queues["orders"] = scheduler.DefaultQueue() },
	})
	if err != nil {
		panic(err)
	}
	defer env.Close()

	c, err := client.New(env.Redis(), client.Config{Namespace: env.Namespace()})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	task := client.Task{ID: "close-order-1234", Queue: "orders", Payload: []byte(`{"order":1234}`), Delay: 30 * time.Minute}
	first, err := c.Enqueue(ctx, task)
	if err != nil {
		panic(err)
	}
	fmt.Println("scheduled", first.ID)
	again, err := c.Enqueue(ctx, task)
	fmt.Println("again:", errors.Is(err, client.ErrDuplicate), again.Due.Equal(first.Due))
	// Output:
	// scheduled close-order-1234
	// again: true true
}

// Look a task up and cancel it: Cancel returns the state the task was
// cancelled from; a running task is not cancelled (client.ErrActive).
func ExampleClient_Cancel() {
	env, err := hourglasstest.New(context.Background(), hourglasstest.Options{}) // queue "default"
	if err != nil {
		panic(err)
	}
	defer env.Close()
	c, err := env.NewClient()
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if _, err := c.Enqueue(ctx, client.Task{ID: "reminder-7", Queue: "default", Delay: time.Hour}); err != nil {
		panic(err)
	}
	info, err := c.Lookup(ctx, "reminder-7")
	if err != nil {
		panic(err)
	}
	fmt.Println(info.ID, info.State, info.Queue)
	from, err := c.Cancel(ctx, "reminder-7")
	fmt.Println("cancelled from", from, err)
	_, err = c.Lookup(ctx, "reminder-7")
	fmt.Println(errors.Is(err, client.ErrNotFound))
	// Output:
	// reminder-7 scheduled default
	// cancelled from scheduled <nil>
	// true
}
