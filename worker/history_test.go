package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestQueueHistoryCounts: what a client and a worker did reaches the
// queue's minute history, counted once each: enqueued, started (every
// attempt), succeeded, retried, dead and cancelled, with a lateness
// quantile. Nothing is written per task: the counts are in Redis after
// the client's Close and the worker's stop.
func TestQueueHistoryCounts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shard.QueuePolicy{MaxRetries: 3, Timeout: 30 * time.Second, Backoff: shard.Backoff{Base: 10 * time.Millisecond, Cap: 10 * time.Millisecond, Factor: 1}})
	c, err := client.New(e.RDB, client.Config{Namespace: ns, Shards: shards})
	if err != nil {
		t.Fatal(err)
	}
	in, err := inspect.New(e.RDB, inspect.Config{Namespace: ns, Shards: shards})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan string, 100)
	handler := func(_ context.Context, task *Task) error {
		switch {
		case strings.HasPrefix(task.ID, "retry") && task.Attempt == 1:
			return errors.New("first attempt fails")
		case strings.HasPrefix(task.ID, "dead"):
			done <- task.ID
			return NoRetry(errors.New("poison"))
		}
		done <- task.ID
		return nil
	}
	_, _, stop := e.start(e.RDB, QueueOptions{Concurrency: 8}, handler)
	ctx := testenv.Ctx(t, 30*time.Second)
	from := time.Now()
	const ok, retried, dead, cancelled = 10, 5, 4, 6
	var tasks []client.Task
	for i := range ok {
		tasks = append(tasks, client.Task{ID: fmt.Sprint("ok", i), Queue: "q"})
	}
	for i := range retried {
		tasks = append(tasks, client.Task{ID: fmt.Sprint("retry", i), Queue: "q"})
	}
	for i := range dead {
		tasks = append(tasks, client.Task{ID: fmt.Sprint("dead", i), Queue: "q"})
	}
	for i := range cancelled {
		tasks = append(tasks, client.Task{ID: fmt.Sprint("later", i), Queue: "q", Delay: time.Hour})
	}
	if _, err := c.EnqueueBatch(ctx, tasks); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, client.Task{ID: "ok0", Queue: "q"}); !errors.Is(err, client.ErrDuplicate) {
		t.Fatalf("duplicate: %v", err) // not counted
	}
	for i := range cancelled - 1 {
		if _, err := c.Cancel(ctx, fmt.Sprint("later", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := in.Cancel(ctx, fmt.Sprint("later", cancelled-1)); err != nil { // inspect writes at once
		t.Fatal(err)
	}
	for range ok + retried + dead {
		select {
		case <-done:
		case <-ctx.Done():
			t.Fatal("tasks not done")
		}
	}
	testenv.WaitFor(t, 10*time.Second, "the dead letters", func() (bool, string) {
		d, err := in.Queue(ctx, "q")
		return err == nil && d.Counts.Dead == dead, fmt.Sprint(d.Counts.Dead, err)
	})
	stop()
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	steps, err := in.QueueHistory(ctx, "q", from.Add(-time.Minute), time.Now().Add(time.Minute), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var sum inspect.QueueStats
	for _, s := range steps {
		sum.Add(s)
		if s.Started > 0 && (s.LatenessP50 < 0 || s.LatenessP99 < s.LatenessP50) {
			t.Errorf("step %v: lateness p50 %s p99 %s", s.At, s.LatenessP50, s.LatenessP99)
		}
	}
	want := inspect.QueueStats{Enqueued: ok + retried + dead + cancelled, Started: ok + 2*retried + dead,
		Succeeded: ok + retried, Retried: retried, Dead: dead, Cancelled: cancelled}
	if sum != want {
		t.Fatalf("history sums %+v, want %+v", sum, want)
	}
}
