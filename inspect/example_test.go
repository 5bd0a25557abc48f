package inspect_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/inspect"
)

// Look up a task and cancel it unless it is running. The Inspector is
// built as a client or a worker is: New(rdb, Config).
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	in, err := inspect.New(rdb, inspect.Config{Namespace: "hourglass", Shards: 16})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	t, err := in.Task(ctx, "close-order-1234")
	switch {
	case errors.Is(err, inspect.ErrNotFound):
		fmt.Println("no such task (finished tasks are deleted)")
		return
	case err != nil:
		panic(err)
	}
	fmt.Println(t.ID, "is", t.State, "in queue", t.Queue)
	st, err := in.Cancel(ctx, t.ID)
	switch {
	case errors.Is(err, inspect.ErrActive):
		fmt.Println("running: not cancelled")
	case err != nil:
		panic(err)
	default:
		fmt.Println("cancelled while", st)
	}
}
