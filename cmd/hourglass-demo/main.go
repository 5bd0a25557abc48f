// Command hourglass-demo runs a complete local Hourglass and shows tasks
// flowing through it: it starts a real redis-server and etcd on free
// loopback ports in a temporary directory, builds and starts scheduler
// replicas and worker processes (cmd/worker, delivering to an HTTP
// endpoint that this program serves), enqueues a steady stream of tasks
// with mixed delays — some fail once or twice and are retried, a few
// always fail and end in the dead-letter queue — and prints a compact
// status line every second until Ctrl-C or -duration. Then it stops every
// process it started and removes the directory.
//
// Usage (from the repository root; `make demo` installs the servers first):
//
//	go run ./cmd/hourglass-demo [-duration 30s] [-schedulers 2] [-workers 2] [-rate 200]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hourglass-sched/hourglass/internal/version"
)

func main() {
	var o options
	flag.DurationVar(&o.duration, "duration", 0, "stop after this long (0: until Ctrl-C)")
	flag.IntVar(&o.schedulers, "schedulers", 2, "scheduler replicas to run")
	flag.IntVar(&o.workers, "workers", 2, "worker processes to run")
	flag.IntVar(&o.shards, "shards", 16, "shard count")
	flag.IntVar(&o.rate, "rate", 200, "tasks enqueued per second")
	flag.DurationVar(&o.maxDelay, "max-delay", 5*time.Second, "largest random delay of a demo task")
	flag.BoolVar(&o.keep, "keep", false, "keep the temporary directory (logs, data) after exit")
	showVersion := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *showVersion {
		fmt.Println(version.String())
		return
	}

	// -duration counts from when everything runs (run applies it): the
	// build of the binaries on a cold cache can take longer than a short
	// demo.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "hourglass-demo:", err)
		os.Exit(1)
	}
}

type options struct {
	duration   time.Duration
	schedulers int
	workers    int
	shards     int
	rate       int
	maxDelay   time.Duration
	keep       bool
	goflags    []string // flags of the go build of the binaries (tests: -race)
	// bins, when set, holds scheduler, worker and hourglass binaries
	// built already (tests: testenv's), linked into the demo's directory
	// instead of a go build of them.
	bins string
}

func (o options) validate() error {
	switch {
	case o.schedulers < 1:
		return fmt.Errorf("-schedulers must be at least 1")
	case o.workers < 0:
		return fmt.Errorf("-workers must not be negative")
	case o.shards < 1:
		return fmt.Errorf("-shards must be at least 1")
	case o.rate < 1:
		return fmt.Errorf("-rate must be at least 1")
	case o.maxDelay < 0:
		return fmt.Errorf("-max-delay must not be negative")
	}
	return nil
}
