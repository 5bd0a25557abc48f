package hourglasstest_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/hourglasstest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
	"github.com/hourglass-sched/hourglass/scheduler"
	"github.com/hourglass-sched/hourglass/worker"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestTasksFlowThroughAnEnv enqueues a delayed task into a started Env
// and sees an in-process worker run it: the scheduler owns every shard
// and moves it when due.
func TestTasksFlowThroughAnEnv(t *testing.T) {
	t.Parallel()
	env := hourglasstest.Start(t, hourglasstest.Options{Configure: func(c *scheduler.Config) {
		c.Shards = 4
		c.Queues["emails"] = scheduler.DefaultQueue()
	}})
	if got := len(env.Scheduler().Owned()); got != 4 {
		t.Fatalf("owned shards = %d, want 4", got)
	}
	c, err := env.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Ctx(t, 30*time.Second)
	w, err := worker.New(env.Redis(), env.WorkerConfig())
	if err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int32
	if err := w.Handle("emails", func(ctx context.Context, t *worker.Task) error {
		ran.Add(1)
		return nil
	}, worker.DefaultQueueOptions()); err != nil {
		t.Fatal(err)
	}
	env.RunWorker(w)
	if _, err := c.Enqueue(ctx, client.Task{ID: "welcome-1", Queue: "emails", Delay: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "the task to run", func() (bool, string) {
		return ran.Load() == 1, ""
	})
	if err := env.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := env.Redis().Ping(ctx).Err(); err == nil {
		t.Fatal("the Env's Redis client still answers after Close")
	}
}

// TestEnvsShareAttachedServers attaches two Envs to one Env's servers:
// each has its own namespace, and a queue of one is unknown to the
// other.
func TestEnvsShareAttachedServers(t *testing.T) {
	t.Parallel()
	base := hourglasstest.Start(t, hourglasstest.Options{NoScheduler: true})
	opts := hourglasstest.Options{RedisAddr: base.RedisAddr(), EtcdEndpoints: base.EtcdEndpoints(), Configure: func(c *scheduler.Config) { c.Shards = 2 }}
	a := hourglasstest.Start(t, opts)
	opts.Configure = func(c *scheduler.Config) {
		c.Shards = 2
		c.Queues = map[string]scheduler.QueueSettings{"only-b": scheduler.DefaultQueue()}
	}
	b := hourglasstest.Start(t, opts)
	if a.Namespace() == b.Namespace() {
		t.Fatalf("two Envs share namespace %q", a.Namespace())
	}
	ca, err := a.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Ctx(t, 10*time.Second)
	if _, err := ca.Enqueue(ctx, client.Task{Queue: "only-b"}); !errors.Is(err, client.ErrUnknownQueue) {
		t.Fatalf("enqueue to b's queue through a: %v, want ErrUnknownQueue", err)
	}
	cb, err := b.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cb.Enqueue(ctx, client.Task{Queue: "only-b"}); err != nil {
		t.Fatalf("enqueue through b: %v", err)
	}
}

// TestBadConfigFailsNew checks that an invalid scheduler configuration
// is an error from New, not a hang.
func TestBadConfigFailsNew(t *testing.T) {
	t.Parallel()
	_, err := hourglasstest.New(context.Background(), hourglasstest.Options{
		RedisAddr: "127.0.0.1:1", EtcdEndpoints: []string{"http://127.0.0.1:1"},
		Configure: func(c *scheduler.Config) { c.Shards = -1 }})
	if err == nil {
		t.Fatal("New with shards -1 succeeded")
	}
}
