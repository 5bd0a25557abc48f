package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/hourglass-sched/hourglass/inspect"
)

// scheduleHistory is `hourglass schedule history NAME`: a schedule's last
// outcomes.
func (a *app) scheduleHistory() *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "history NAME",
		Short: "A periodic schedule's last occurrences: fired, refused, skipped (and why), caught up",
		Long: `The last outcomes of periodic schedule NAME, newest first, as the owner
of its home shard recorded them (docs/periodic.md, "History"): each
occurrence fired (its task enqueued), found fired already, refused (and
why), or skipped (paused; overlap, while its last task still ran; or
missed while no scheduler ran and not caught up by the catch-up policy,
several in one row), and those fired late by catch-up marked caught up.
At most ` + fmt.Sprint(inspect.MaxHistory) + ` are kept, for 30 days after the last.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 1 || limit > inspect.MaxHistory {
				return usagef("--limit %d: want 1..%d", limit, inspect.MaxHistory)
			}
			in, ctx, done, err := a.session(cmd)
			if err != nil {
				return err
			}
			defer done()
			h, err := in.ScheduleHistory(ctx, args[0], limit)
			if err != nil {
				return err
			}
			return a.emit(struct {
				History []inspect.Occurrence `json:"history"`
			}{h}, func(w io.Writer) {
				row(w, "OCCURRENCE", "OUTCOME", "RECORDED", "TASK", "DETAIL")
				for _, o := range h {
					out := o.Outcome
					if o.CaughtUp {
						out += " (caught up)"
					}
					if o.Count > 1 {
						out += fmt.Sprintf(" ×%d", o.Count)
					}
					row(w, when(o.At), out, when(o.Recorded), orDash(o.TaskID), orDash(o.Detail))
				}
				if len(h) == 0 {
					row(w, "(no history: the schedule never fired, or its history expired)")
				}
			})
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 20, fmt.Sprintf("outcomes to show, 1..%d", inspect.MaxHistory))
	return cmd
}
