package config

import (
	"slices"
	"time"

	"github.com/hourglass-sched/hourglass/worker"
)

// WorkerConfig configures the worker process.
type WorkerConfig struct {
	// ShutdownGrace is how long running handlers may finish after a
	// shutdown signal before their tasks are released.
	ShutdownGrace time.Duration `koanf:"shutdown_grace"`
	// FetchTimeout bounds one blocking fetch from the ready lists (whole
	// seconds: Redis's BLMPOP timeout as go-redis sends it). An idle
	// worker sends one command per FetchTimeout; shutdown ends a fetch
	// in flight at once.
	FetchTimeout time.Duration `koanf:"fetch_timeout"`
	// AckLinger is how long a successful task's acknowledgement may wait
	// for others to share its round trip to Redis.
	AckLinger time.Duration `koanf:"ack_linger"`
	// RegistrationWait is how long the worker waits at start for a
	// scheduler to register each of its queues in its namespace before it
	// exits non-zero naming what is missing.
	RegistrationWait time.Duration `koanf:"registration_wait"`
	// Tracing configures the worker's OpenTelemetry spans
	// (docs/tracing.md).
	Tracing TracingConfig `koanf:"tracing"`
	// Version is the version the worker says it runs, for the queues'
	// routing; Tags are its tags ("canary").
	Version string   `koanf:"version"`
	Tags    []string `koanf:"tags"`
}

// TracingConfig configures where the worker binary's spans go.
type TracingConfig struct {
	// Exporter is "otlp", "file", or "" for no tracing.
	Exporter string `koanf:"exporter"`
	// Endpoint is the OTLP/HTTP collector's URL.
	Endpoint string `koanf:"endpoint"`
	// File is where the file exporter appends its JSON lines.
	File string `koanf:"file"`
}

func defaultWorker() WorkerConfig {
	return WorkerConfig{
		ShutdownGrace:    worker.DefaultShutdownGrace,
		FetchTimeout:     worker.DefaultFetchTimeout,
		AckLinger:        worker.DefaultAckLinger,
		RegistrationWait: worker.DefaultRegistrationWait,
		Tags:             []string{},
	}
}

// ForWorker returns the worker library's settings (Logger and Registerer
// are the caller's to set). A key's 0 means what the library's zero field
// means: worker.shutdown_grace 0 is worker.NoGrace, worker.ack_linger 0
// worker.NoAckLinger.
func (c *Config) ForWorker() worker.Config {
	var tags []string // none: nil, as the library's default
	if len(c.Worker.Tags) > 0 {
		tags = slices.Clone(c.Worker.Tags)
	}
	return worker.Config{
		Namespace:        c.Namespace,
		Shards:           c.Shards,
		ShutdownGrace:    c.Worker.ShutdownGrace,
		FetchTimeout:     c.Worker.FetchTimeout,
		AckLinger:        c.Worker.AckLinger,
		LayoutRefresh:    c.LayoutRefresh,
		RegistrationWait: c.Worker.RegistrationWait,
		Version:          c.Worker.Version,
		Tags:             tags,
	}
}
