package periodic_test

import (
	"context"
	"fmt"
	"time"

	"github.com/hourglass-sched/hourglass/hourglasstest"
	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/periodic"
	"github.com/hourglass-sched/hourglass/worker"
)

// A cron schedule in a time zone: Compile validates it and applies its
// defaults, Next computes its occurrences.
func ExampleSchedule_Compile() {
	s, err := periodic.Schedule{Name: "nightly-report", Queue: "reports", Cron: "0 2 * * *", TimeZone: "Europe/Berlin"}.Compile()
	if err != nil {
		panic(err)
	}
	t := time.Date(2026, time.January, 10, 12, 0, 0, 0, time.UTC)
	for range 3 {
		t = s.Next(t)
		fmt.Println(t.UTC().Format(time.RFC3339))
	}
	// Output:
	// 2026-01-11T01:00:00Z
	// 2026-01-12T01:00:00Z
	// 2026-01-13T01:00:00Z
}

// Register a schedule at run time: the schedulers fire it, once per
// occurrence whichever replica owns it, and a worker of its queue runs
// each task.
func ExampleSchedule() {
	env, err := hourglasstest.New(context.Background(), hourglasstest.Options{}) // queue "default"
	if err != nil {
		panic(err)
	}
	defer env.Close()
	ctx := context.Background()

	w, err := worker.New(env.Redis(), env.WorkerConfig())
	if err != nil {
		panic(err)
	}
	fired := make(chan string, 10)
	if err := w.Handle("default", func(ctx context.Context, t *worker.Task) error {
		fired <- string(t.Payload)
		return nil
	}, worker.DefaultQueueOptions()); err != nil {
		panic(err)
	}
	env.RunWorker(w)

	in, err := inspect.New(env.Redis(), inspect.Config{Namespace: env.Namespace()})
	if err != nil {
		panic(err)
	}
	err = in.SetSchedule(ctx, periodic.Schedule{Name: "heartbeat", Queue: "default", Interval: time.Second, Payload: []byte("ping")})
	if err != nil {
		panic(err)
	}
	fmt.Println("fired:", <-fired)
	if err := in.RemoveSchedule(ctx, "heartbeat"); err != nil {
		panic(err)
	}
	// Output: fired: ping
}
