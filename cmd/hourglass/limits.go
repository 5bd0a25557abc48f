package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/hourglass-sched/hourglass/inspect"
)

// queueLimit is `hourglass queue limit QUEUE`: set or clear a queue's
// flow-control limits at run time.
func (a *app) queueLimit() *cobra.Command {
	var (
		l     inspect.QueueLimits
		clear bool
	)
	cmd := &cobra.Command{
		Use:   "limit QUEUE",
		Short: "Set a queue's cluster-wide limits at run time, or --clear them",
		Long: `Set a queue's cluster-wide flow control at run time, for every worker
that consumes it under flow control (with max_concurrency or rate_limit
in its configuration): the limits given here replace the workers' own,
all of them (a flag not given is off or the default: --max-concurrency 5
alone drops a configured rate limit), within a moment. --clear returns
the workers to their own configuration. A worker that consumes the queue
without flow control ignores them, and logs that.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f := cmd.Flags()
			set := f.Changed("max-concurrency") || f.Changed("rate") || f.Changed("period") || f.Changed("burst") || f.Changed("kind")
			switch {
			case set == clear:
				return usagef("give limits (--max-concurrency, --rate, --period, --burst, --kind) or --clear, not both")
			case set && l.Rate == 0 && l.MaxConcurrency == 0:
				// Limits of neither kind would lift the queue's flow
				// control in every worker: most likely a mistake.
				return usagef("give --rate or --max-concurrency above 0 (--clear gives the workers their own limits back)")
			case l.Rate == 0 && (f.Changed("period") || f.Changed("burst") || f.Changed("kind")):
				return usagef("--period, --burst and --kind go with --rate")
			}
			in, ctx, done, err := a.session(cmd)
			if err != nil {
				return err
			}
			defer done()
			if clear {
				if err := in.ClearQueueLimits(ctx, args[0]); err != nil {
					return err
				}
				return a.done(actionResult{Action: "cleared the limits of", Queue: args[0]})
			}
			if err := in.SetQueueLimits(ctx, args[0], l); err != nil {
				return err
			}
			return a.emit(actionResult{Action: "limited", Queue: args[0], Limits: &l}, func(w io.Writer) {
				fmt.Fprintf(w, "limited %s: %s\n", printable(args[0]), l.String())
			})
		},
	}
	f := cmd.Flags()
	f.IntVar(&l.MaxConcurrency, "max-concurrency", 0, "handlers of the queue running at once in the whole cluster (0: no cap)")
	f.IntVar(&l.Rate, "rate", 0, "handler starts per --period in the whole cluster (0: no rate limit)")
	f.DurationVar(&l.Period, "period", 0, "period of --rate (0: 1s)")
	f.IntVar(&l.Burst, "burst", 0, "starts at once (token_bucket) or admitted ahead of their turn (leaky_bucket) (0: 1)")
	f.StringVar(&l.Kind, "kind", "", "limiter of --rate: token_bucket (default), sliding_window, fixed_window or leaky_bucket")
	f.BoolVar(&clear, "clear", false, "drop the limits set at run time")
	return cmd
}
