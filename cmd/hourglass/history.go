package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/hourglass-sched/hourglass/inspect"
)

// queueHistory prints `hourglass stats QUEUE`: a queue's minute history
// (docs/operations.md, "Queue history").
func (a *app) queueHistory(cmd *cobra.Command, queue string, since, step time.Duration) error {
	if since < time.Minute || since > inspect.HistoryKeep {
		return usagef("--since %s: want 1m..%s", since, inspect.HistoryKeep)
	}
	if step == 0 {
		step = max((since / 60).Truncate(time.Minute), time.Minute) // about 60 rows
	}
	if step < time.Minute || step%time.Minute != 0 {
		return usagef("--step %s: want whole minutes", step)
	}
	in, ctx, done, err := a.session(cmd)
	if err != nil {
		return err
	}
	defer done()
	to := time.Now()
	h, err := in.QueueHistory(ctx, queue, to.Add(-since), to, step)
	if err != nil {
		return err
	}
	return a.emit(struct {
		Queue   string               `json:"queue"`
		Step    string               `json:"step"`
		History []inspect.QueueStats `json:"history"`
	}{queue, step.String(), h}, func(w io.Writer) {
		row(w, "FROM", "ENQUEUED", "STARTED", "SUCCEEDED", "RETRIED", "DEAD", "CANCELLED", "LATE P50", "LATE P99", "READY", "OLDEST READY")
		var sum inspect.QueueStats
		for _, s := range h {
			row(w, when(s.At), s.Enqueued, s.Started, s.Succeeded, s.Retried, s.Dead, s.Cancelled,
				lateText(s.LatenessP50), lateText(s.LatenessP99), s.Ready, ageText(s.OldestReady))
			sum.Add(s)
		}
		row(w, "total", sum.Enqueued, sum.Started, sum.Succeeded, sum.Retried, sum.Dead, sum.Cancelled)
	})
}

// lateText shows a lateness quantile; "-" when nothing started.
func lateText(d time.Duration) string {
	switch {
	case d < 0:
		return "-"
	case d < time.Second:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	}
	return d.Round(10 * time.Millisecond).String()
}

// ageText shows the age of the oldest ready task; "-" for none.
func ageText(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return d.String()
}
