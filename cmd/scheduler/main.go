// Command scheduler runs one Hourglass scheduler replica: it competes for
// shard ownership through etcd and moves due tasks of the shards it owns
// into their ready lists. It is a thin shell over package scheduler,
// which runs the same replica inside a Go program: this command reads
// the configuration, logs with hclog and stops on a signal.
//
// Usage:
//
//	scheduler [-config file.yaml] [-set key=value ...]
//
// Configuration comes from built-in defaults, the YAML file, HOURGLASS_*
// environment variables and -set flags, in rising precedence; see
// configs/scheduler.example.yaml. An invalid value (a TLS file that is
// missing or not PEM included) exits with status 2
// and a message naming the key. SIGTERM or SIGINT resigns every shard
// so other replicas take over at once, then exits 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/hourglass-sched/hourglass/internal/config"
	"github.com/hourglass-sched/hourglass/internal/connect"
	"github.com/hourglass-sched/hourglass/internal/version"
	"github.com/hourglass-sched/hourglass/scheduler"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	cfg, err := config.Load(args, os.Environ())
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, config.Usage())
		return 0
	}
	if errors.Is(err, config.ErrVersion) {
		fmt.Println(version.String())
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "scheduler: %v\n", err)
		return 2
	}
	log := connect.Logger(cfg.Log, "scheduler", os.Stderr)
	log.Debug("effective configuration", "config", fmt.Sprintf("%+v", cfg.Redacted()))

	s, err := scheduler.New(scheduler.Config{Settings: scheduler.Settings(*cfg), Logger: log})
	if err != nil {
		log.Error("start failed", "error", err)
		return 1
	}
	defer s.Close()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := s.Run(ctx); err != nil {
		log.Error("scheduler failed", "error", err)
		return 1
	}
	return 0
}
