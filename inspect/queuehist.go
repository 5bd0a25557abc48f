package inspect

import (
	"context"
	"time"

	"github.com/hourglass-sched/hourglass/internal/history"
	"github.com/hourglass-sched/hourglass/internal/shard"
)

// HistoryKeep is how far back a queue's history reaches: seven days.
const HistoryKeep = shard.HistoryKeep

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
