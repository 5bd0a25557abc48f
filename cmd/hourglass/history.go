package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/hourglass-sched/hourglass/inspect"
)

func (a *app) statsCmd() *cobra.Command {
	var since, step time.Duration
	cmd := &cobra.Command{
		Use:   "stats [QUEUE]",
		Short: "Totals per state and per queue; with QUEUE, its history (per minute, 7 days back)",
		Long: `Without QUEUE: the totals per state, and per queue (as queue ls).

With QUEUE: the queue's history (docs/operations.md, "Queue history"),
from --since ago to now in rows of --step: tasks enqueued, started,
succeeded, retried, dead-lettered and cancelled; the handler-start
lateness p50 and p99 (estimated from a histogram); the ready depth and
the age of the oldest ready task (the largest sample of the row). Times
are local, 24-hour, with the zone.`,
		Args: maxArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				return a.queueHistory(cmd, args[0], since, step)
			}
			l, err := a.listQueues(cmd)
			return a.emitQueues(cmd, l, func(w io.Writer) {
				t := l.Total
				row(w, "scheduled", t.Scheduled)
				row(w, "ready", t.Ready)
				row(w, "in flight", t.InFlight)
				row(w, "dead", t.Dead)
				row(w, "queues", len(l.Queues))
				row(w, "")
				queueTable(w, l)
			}, err)
		},
	}
	cmd.Flags().DurationVar(&since, "since", time.Hour, "with QUEUE: how far back, 1m..168h (7 days)")
	cmd.Flags().DurationVar(&step, "step", 0, "with QUEUE: the rows' length in whole minutes (0: about 60 rows)")
	return cmd
}

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
