package scheduler_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/hourglass-sched/hourglass"
	"github.com/hourglass-sched/hourglass/scheduler"
)

// TestLoadSettingsReadsAFile reads a YAML file over the defaults and
// names the key of a bad one.
func TestLoadSettingsReadsAFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte("shards: 4\nqueues:\n  emails:\n    max_retries: 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := scheduler.LoadSettings(good)
	if err != nil {
		t.Fatal(err)
	}
	if s.Shards != 4 || s.Queues["emails"].MaxRetries != 3 || s.Namespace != scheduler.DefaultSettings().Namespace {
		t.Fatalf("settings = shards %d, emails %+v, namespace %q", s.Shards, s.Queues["emails"], s.Namespace)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("shards: -3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = scheduler.LoadSettings(bad)
	if !errors.Is(err, hourglass.ErrInvalidConfig) || !strings.Contains(err.Error(), "shards") {
		t.Fatalf("LoadSettings(shards: -3) = %v, want ErrInvalidConfig naming shards", err)
	}
}

// TestNewValidates refuses what Run could not use, before any I/O.
func TestNewValidates(t *testing.T) {
	for name, change := range map[string]func(*scheduler.Config){
		"two loggers": func(c *scheduler.Config) { c.Slog, c.Logger = slog.Default(), hclog.NewNullLogger() },
		"no queues":   func(c *scheduler.Config) { c.Queues = nil },
		"bad shards":  func(c *scheduler.Config) { c.Shards = -1 },
	} {
		cfg := scheduler.DefaultConfig()
		change(&cfg)
		if _, err := scheduler.New(cfg); !errors.Is(err, hourglass.ErrInvalidConfig) {
			t.Errorf("%s: New = %v, want ErrInvalidConfig", name, err)
		}
	}
}

// TestReadyEndsWithItsContext: Ready on a replica that never ran
// returns the context's error instead of blocking. Its zero shard count
// and lease TTL mean their defaults.
func TestReadyEndsWithItsContext(t *testing.T) {
	cfg := scheduler.DefaultConfig()
	cfg.HTTP.Addr = ""
	cfg.Shards, cfg.Scheduler.LeaseTTL = 0, 0
	s, err := scheduler.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Ready(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Ready = %v, want context.Canceled", err)
	}
}

// TestNewLeavesTheCallersConfigAlone: New fills defaults into a copy, so
// the running replica shares no map with the caller's Config.
func TestNewLeavesTheCallersConfigAlone(t *testing.T) {
	cfg := scheduler.DefaultConfig()
	q := scheduler.DefaultQueue()
	q.Concurrency = 0 // its zero means the default: New fills it in its copy
	cfg.Queues["q"] = q
	s, err := scheduler.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := cfg.Queues["q"].Concurrency; got != 0 {
		t.Fatalf("New changed the caller's queue settings: concurrency %d", got)
	}
}

// TestReadyAfterRunStopped: Ready does not wait for a replica whose Run
// returned before it registered the queues, and Run stopped by its
// context returns nil.
func TestReadyAfterRunStopped(t *testing.T) {
	cfg := scheduler.DefaultConfig()
	cfg.Redis.Addr, cfg.Etcd.Endpoints = "127.0.0.1:1", []string{"http://127.0.0.1:1"}
	s, err := scheduler.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Run(ctx); err != nil {
		t.Fatalf("Run stopped by its context = %v, want nil", err)
	}
	if err := s.Ready(context.Background()); !errors.Is(err, scheduler.ErrStopped) {
		t.Fatalf("Ready after Run returned = %v, want ErrStopped", err)
	}
}
