package scheduler_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/hourglass-sched/hourglass/hourglasstest"
	"github.com/hourglass-sched/hourglass/scheduler"
)

// Run a scheduler replica inside a program, from a Config struct.
func Example() {
	// Servers for the example (hourglasstest starts them); a program
	// names its own.
	servers, err := hourglasstest.New(context.Background(), hourglasstest.Options{NoScheduler: true})
	if err != nil {
		panic(err)
	}
	defer servers.Close()

	cfg := scheduler.DefaultConfig()
	cfg.Redis.Addr = servers.RedisAddr()
	cfg.Etcd.Endpoints = servers.EtcdEndpoints()
	cfg.Namespace = "shop"
	cfg.Queues["orders"] = scheduler.DefaultQueue()
	cfg.Slog = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := scheduler.New(cfg)
	if err != nil {
		panic(err)
	}
	defer s.Close()

	ctx, stop := context.WithCancel(context.Background())
	stopped := make(chan error)
	go func() { stopped <- s.Run(ctx) }()
	if err := s.Ready(ctx); err != nil { // "default" and "orders" are registered
		panic(err)
	}
	fmt.Println("queues registered")
	stop() // resigns its shards so another replica takes them at once
	fmt.Println("stopped:", <-stopped)
	// Output:
	// queues registered
	// stopped: <nil>
}
