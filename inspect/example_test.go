package inspect_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/hourglasstest"
	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/worker"
)

// List the dead letters of a queue, and replay one: it is scheduled
// again with its attempts reset.
func ExampleInspector_ListDead() {
	env, err := hourglasstest.New(context.Background(), hourglasstest.Options{}) // queue "default"
	if err != nil {
		panic(err)
	}
	defer env.Close()
	ctx := context.Background()

	// A worker that dead-letters what it gets, and a task for it.
	w, err := worker.New(env.Redis(), env.WorkerConfig())
	if err != nil {
		panic(err)
	}
	if err := w.Handle("default", func(ctx context.Context, t *worker.Task) error {
		return worker.NoRetry(errors.New("malformed order"))
	}, worker.DefaultQueueOptions()); err != nil {
		panic(err)
	}
	env.RunWorker(w)
	c, err := env.NewClient()
	if err != nil {
		panic(err)
	}
	if _, err := c.Enqueue(ctx, client.Task{ID: "order-9", Queue: "default"}); err != nil {
		panic(err)
	}

	in, err := inspect.New(env.Redis(), inspect.Config{Namespace: env.Namespace()})
	if err != nil {
		panic(err)
	}
	var page inspect.Page
	for deadline := time.Now().Add(10 * time.Second); len(page.Tasks) == 0; { // until the worker has run it
		if page, err = in.ListDead(ctx, inspect.DeadFilter{Queue: "default"}, "", inspect.DefaultLimit); err != nil {
			panic(err)
		}
		if time.Now().After(deadline) {
			panic("no dead letter after 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, t := range page.Tasks {
		fmt.Printf("%s: %s (%s)\n", t.ID, t.Dead.Reason, t.LastError)
	}
	if err := in.Replay(ctx, "order-9", time.Now().Add(time.Hour)); err != nil {
		panic(err)
	}
	t, err := in.Task(ctx, "order-9")
	if err != nil {
		panic(err)
	}
	fmt.Println(t.ID, t.State, t.Attempts)
	// Output:
	// order-9: not retryable (malformed order)
	// order-9 scheduled 0
}
