package inspect

import (
	"context"
	"time"

	"github.com/hourglass-sched/hourglass/internal/history"
	"github.com/hourglass-sched/hourglass/internal/shard"
)

// HistoryKeep is how far back a queue's history reaches: seven days.
const HistoryKeep = shard.HistoryKeep

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

// QueueHistory returns queue's history from from to to (minutes, both
// included; at most HistoryKeep back), in steps of step (a whole number
// of minutes, at least one; steps start at multiples of step since the
// Unix epoch), oldest first. Every step of the range is there, zero
// where nothing was recorded. ErrInvalidArgument for a name no queue can
// have, or a range that ends before it starts.
func (i *Inspector) QueueHistory(ctx context.Context, queue string, from, to time.Time, step time.Duration) ([]QueueStats, error) {
	if !shard.ValidQueue(queue) {
		return nil, errorf(ErrInvalidArgument, "queue name %q", queue)
	}
	if to.Before(from) {
		return nil, errorf(ErrInvalidArgument, "history from %s to %s ends before it starts", from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	ms, err := i.store.QueueHistory(ctx, queue, from, to)
	if err != nil {
		return nil, mapErr(err)
	}
	steps := history.Steps(ms, step)
	out := make([]QueueStats, len(steps))
	for j := range steps {
		st := &steps[j]
		q := QueueStats{At: st.At, Ready: st.Depth, OldestReady: time.Duration(st.Oldest) * time.Second,
			Enqueued: st.Counts[shard.HistEnqueued], Started: st.Counts[shard.HistStarted],
			Succeeded: st.Counts[shard.HistSucceeded], Retried: st.Counts[shard.HistRetried],
			Dead: st.Counts[shard.HistDead], Cancelled: st.Counts[shard.HistCancelled],
			LatenessP50: -1, LatenessP99: -1}
		if d, ok := history.Quantile(&st.Minute, 0.5); ok {
			q.LatenessP50 = d
		}
		if d, ok := history.Quantile(&st.Minute, 0.99); ok {
			q.LatenessP99 = d
		}
		out[j] = q
	}
	return out, nil
}

// countCancelled adds a cancellation to queue's history at once (one
// script call: an admin's cancel is rare, and a CLI process does not
// live to flush later). A failure is not the cancel's.
func (i *Inspector) countCancelled(ctx context.Context, queue string) {
	if queue == "" {
		return
	}
	var m shard.Minute
	m.Counts[shard.HistCancelled] = 1
	_ = i.store.AddQueueHistory(ctx, []shard.QueueMinute{{Queue: queue, At: time.Now(), Minute: m}})
}
