package inspect

import "time"

// QueueStats is one step of a queue's history (docs/operations.md,
// "Queue history"): what happened in the minutes from At on.
type QueueStats struct {
	// At is the step's first minute.
	At time.Time `json:"at"`
	// Enqueued counts the tasks stored by Go clients (client.Client's
	// enqueues, not those of producers in other languages) and by
	// periodic schedules; Started the handler starts, each attempt once;
	// Succeeded, Retried (failed attempts that will run again) and Dead
	// (dead-lettered) the outcomes that workers reported, and the
	// failed attempts the schedulers' recovery found (expired leases,
	// tasks a worker lost); Cancelled the
	// tasks cancelled before they ended (through client.Client or
	// inspect, not dead letters).
	Enqueued  uint64 `json:"enqueued"`
	Started   uint64 `json:"started"`
	Succeeded uint64 `json:"succeeded"`
	Retried   uint64 `json:"retried"`
	Dead      uint64 `json:"dead"`
	Cancelled uint64 `json:"cancelled"`
	// LatenessP50 and LatenessP99 estimate the handler-start lateness
	// (start minus due time) of the step's starts from a histogram of
	// 16 buckets (1 ms to 1 min), interpolated inside a bucket; -1 when
	// nothing started.
	LatenessP50 time.Duration `json:"lateness_p50"`
	LatenessP99 time.Duration `json:"lateness_p99"`
	// Ready is the largest ready depth sampled in the step (each shard's
	// owner samples it once a minute while the shard has work; 0 when no
	// sample was taken), and OldestReady the largest age of the oldest
	// ready task then, to the second.
	Ready       uint64        `json:"ready"`
	OldestReady time.Duration `json:"oldest_ready"`
}

// Add adds o's counters to s and keeps the larger Ready and OldestReady;
// the lateness quantiles, which do not add up, are left as they are.
func (s *QueueStats) Add(o QueueStats) {
	s.Enqueued += o.Enqueued
	s.Started += o.Started
	s.Succeeded += o.Succeeded
	s.Retried += o.Retried
	s.Dead += o.Dead
	s.Cancelled += o.Cancelled
	s.Ready, s.OldestReady = max(s.Ready, o.Ready), max(s.OldestReady, o.OldestReady)
}
