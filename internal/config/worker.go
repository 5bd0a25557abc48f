package config

import (
	"time"

	"github.com/hourglass-sched/hourglass/worker"
)

// WorkerConfig configures the worker process.
type WorkerConfig struct {
	// ShutdownGrace is how long running handlers may finish after a
	// shutdown signal before their tasks are released, 0 or more; 0
	// releases them at once. Default 30s.
	ShutdownGrace time.Duration `koanf:"shutdown_grace"`
	// FetchTimeout bounds one blocking fetch from the ready lists: a
	// whole number of seconds (Redis's BLMPOP timeout as go-redis sends
	// it) from 1s to 60s. An idle worker sends one command per
	// FetchTimeout. Default 2s.
	FetchTimeout time.Duration `koanf:"fetch_timeout"`
	// AckLinger is how long a successful task's acknowledgement may wait
	// for others to share its round trip to Redis, 0 to 50ms; 0 sends
	// each at once. Default 2ms.
	AckLinger time.Duration `koanf:"ack_linger"`
}

func defaultWorker() WorkerConfig {
	return WorkerConfig{
		ShutdownGrace: worker.DefaultShutdownGrace,
		FetchTimeout:  worker.DefaultFetchTimeout,
		AckLinger:     worker.DefaultAckLinger,
	}
}

func (v *validator) worker(w WorkerConfig) {
	v.durationRange("worker.shutdown_grace", w.ShutdownGrace, 0, 0)
	v.durationRange("worker.fetch_timeout", w.FetchTimeout, worker.MinFetchTimeout, worker.MaxFetchTimeout)
	v.durationRange("worker.ack_linger", w.AckLinger, 0, worker.MaxAckLinger)
	if ft := w.FetchTimeout; ft%time.Second != 0 {
		// go-redis sends BLMPOP's timeout in whole seconds; refuse rather
		// than truncate.
		v.add("worker.fetch_timeout", "must be a whole number of seconds (got %s)", ft)
	}
}

// ForWorker returns the worker library's settings (Logger and Registerer
// are the caller's to set). A 0 in the file means "none" where the
// library reads 0 as "the default": worker.shutdown_grace 0 is
// worker.NoGrace, worker.ack_linger 0 is worker.NoAckLinger.
func (c *Config) ForWorker() worker.Config {
	return worker.Config{
		Namespace:     c.Namespace,
		Shards:        c.Shards,
		ShutdownGrace: zeroMeansNone(c.Worker.ShutdownGrace, worker.NoGrace),
		FetchTimeout:  c.Worker.FetchTimeout,
		AckLinger:     zeroMeansNone(c.Worker.AckLinger, worker.NoAckLinger),
		LayoutRefresh: c.LayoutRefresh,
	}
}

// zeroMeansNone maps a duration key whose 0 means "none" to the library's
// sentinel for none: the libraries read 0 as "use the default".
func zeroMeansNone(d, none time.Duration) time.Duration {
	if d == 0 {
		return none
	}
	return d
}
