// Command tour is docs/go-api.md's walk-through as one program: a
// scheduler replica and a worker in this process, a typed task whose
// handler fails once and then succeeds, a batch, a cancel and a lookup,
// a periodic schedule and the dead-letter list.
//
//	go run ./examples/tour                                   # starts redis-server and etcd
//	go run ./examples/tour -redis 127.0.0.1:6379 -etcd http://127.0.0.1:2379
//
// make test runs it (main_test.go) and checks what it prints.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass"
	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/hourglasstest"
	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/periodic"
	"github.com/hourglass-sched/hourglass/scheduler"
	"github.com/hourglass-sched/hourglass/worker"
)

func main() {
	os.Exit(run())
}

// run is main's body, so that its deferred calls (the servers' stop)
// run before the process exits.
func run() int {
	redisAddr := flag.String("redis", "", "Redis host:port; empty starts redis-server and etcd for the tour")
	etcdURL := flag.String("etcd", "http://127.0.0.1:2379", "etcd endpoint, with -redis")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if *redisAddr == "" {
		servers, err := hourglasstest.New(ctx, hourglasstest.Options{NoScheduler: true})
		if err != nil {
			fmt.Fprintln(os.Stderr, "tour:", err)
			return 1
		}
		defer servers.Close()
		*redisAddr, *etcdURL = servers.RedisAddr(), servers.EtcdEndpoints()[0]
	}
	if err := tour(ctx, os.Stdout, *redisAddr, *etcdURL); err != nil {
		fmt.Fprintln(os.Stderr, "tour:", err)
		return 1
	}
	return 0
}

// signup is the payload of the "emails" queue's tasks.
type signup struct {
	Email string `json:"email"`
}

// tour runs the walk-through against the Redis at redisAddr and the etcd
// at etcdURL, in a namespace of its own ("tour-" and the time), printing
// to out.
func tour(ctx context.Context, out io.Writer, redisAddr, etcdURL string) error {
	ns := fmt.Sprintf("tour-%d", time.Now().UnixNano())
	// 1. A scheduler replica: it registers the queues, moves due tasks,
	// retries, dead-letters and fires periodic schedules.
	cfg := scheduler.DefaultConfig()
	cfg.Namespace, cfg.Redis.Addr, cfg.Etcd.Endpoints = ns, redisAddr, []string{etcdURL}
	cfg.Queues["emails"] = scheduler.DefaultQueue()
	cfg.Slog = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	sched, err := scheduler.New(cfg)
	if err != nil {
		return err
	}
	defer sched.Close()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	schedDone := make(chan error, 1)
	go func() { schedDone <- sched.Run(runCtx) }()
	defer func() { stop(); <-schedDone }()
	if err := sched.Ready(ctx); err != nil {
		return err
	}

	// 2. A worker with a typed handler. Ada's first attempt fails and is
	// retried 10 ms later; a task without an address is dead-lettered.
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	wcfg := worker.DefaultConfig()
	wcfg.Namespace, wcfg.Slog = ns, cfg.Slog
	w, err := worker.New(rdb, wcfg)
	if err != nil {
		return err
	}
	sent := make(chan string, 16)
	err = w.Handle("emails", worker.Typed(func(ctx context.Context, t *worker.Task, s signup) error {
		switch {
		case s.Email == "":
			return worker.NoRetry(errors.New("no address"))
		case t.ID == "welcome-ada" && t.Attempt == 1:
			return worker.RetryAfter(10*time.Millisecond, errors.New("smtp busy"))
		}
		sent <- fmt.Sprintf("sent to %s (attempt %d)", s.Email, t.Attempt)
		return nil
	}), worker.DefaultQueueOptions())
	if err != nil {
		return err
	}
	workerDone := make(chan error, 1)
	go func() { workerDone <- w.Run(runCtx) }()
	defer func() { stop(); <-workerDone }()

	// 3. Enqueue a typed payload, due in 100 ms.
	c, err := client.New(rdb, client.Config{Namespace: ns})
	if err != nil {
		return err
	}
	if _, err := client.EnqueueOf(ctx, c, client.Task{ID: "welcome-ada", Queue: "emails", Delay: 100 * time.Millisecond},
		signup{Email: "ada@example.com"}); err != nil {
		return err
	}
	fmt.Fprintln(out, <-sent)

	// 4. A batch: one round trip, one result per task.
	var batch []client.Task
	for _, name := range []string{"alan", "grace", "edsger"} {
		payload, err := c.Encode(signup{Email: name + "@example.com"})
		if err != nil {
			return err
		}
		batch = append(batch, client.Task{ID: "welcome-" + name, Queue: "emails", Payload: payload})
	}
	if _, err := c.EnqueueBatch(ctx, batch); err != nil {
		return err
	}
	lines := []string{<-sent, <-sent, <-sent}
	slices.Sort(lines) // they run concurrently
	for _, l := range lines {
		fmt.Fprintln(out, l)
	}

	// 5. Look up a task, cancel it, look it up again.
	if _, err := client.EnqueueOf(ctx, c, client.Task{ID: "reminder-ada", Queue: "emails", Delay: time.Hour},
		signup{Email: "ada@example.com"}); err != nil {
		return err
	}
	info, err := c.Lookup(ctx, "reminder-ada")
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "reminder-ada is", info.State)
	from, err := c.Cancel(ctx, "reminder-ada")
	if err != nil {
		return err
	}
	_, err = c.Lookup(ctx, "reminder-ada")
	fmt.Fprintln(out, "cancelled from", from, "then not found:", errors.Is(err, hourglass.ErrNotFound))

	// 6. A periodic schedule, registered at run time: every second.
	in, err := inspect.New(rdb, inspect.Config{Namespace: ns})
	if err != nil {
		return err
	}
	digest, err := c.Encode(signup{Email: "team@example.com"})
	if err != nil {
		return err
	}
	if err := in.SetSchedule(ctx, periodic.Schedule{Name: "digest", Queue: "emails", Interval: time.Second, Payload: digest}); err != nil {
		return err
	}
	fmt.Fprintln(out, "periodic:", <-sent)
	if err := in.RemoveSchedule(ctx, "digest"); err != nil {
		return err
	}

	// 7. The dead-letter list.
	if _, err := client.EnqueueOf(ctx, c, client.Task{ID: "welcome-nobody", Queue: "emails"}, signup{}); err != nil {
		return err
	}
	for {
		page, err := in.ListDead(ctx, inspect.DeadFilter{Queue: "emails"}, "", 10)
		if err != nil {
			return err
		}
		if len(page.Tasks) > 0 {
			for _, t := range page.Tasks {
				fmt.Fprintf(out, "dead: %s (%s: %s)\n", t.ID, t.Dead.Reason, t.LastError)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}
