package main

import (
	"cmp"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

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

// queueWeight is `hourglass queue weight QUEUE KEY WEIGHT`: set the
// weight of a key of a fair queue at run time.
func (a *app) queueWeight() *cobra.Command {
	return &cobra.Command{
		Use:   "weight QUEUE KEY WEIGHT",
		Short: "Set the weight of a key of a fair queue: its turns per round (0 pauses the key)",
		Long: `Set the weight of a key (a task id's hash tag, client.Task.Key) of a fair
queue (queues.<q>.fair): in each shard the key takes WEIGHT turns per
round of the queue's ring, the keys without one 1 each. WEIGHT 1 drops
the key's own weight; WEIGHT 0 pauses the key: its tasks wait, unclaimed,
and its turns go to the other keys, until a weight above 0 is set. It
takes effect at once (every shard's window is refilled). KEY "" is the
keyless tasks' key.`,
		Args: exactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			weight, err := strconv.Atoi(args[2])
			if err != nil || weight < 0 || weight > inspect.MaxKeyWeight {
				return usagef("WEIGHT must be a whole number from 0 to %d", inspect.MaxKeyWeight)
			}
			in, ctx, done, err := a.session(cmd)
			if err != nil {
				return err
			}
			defer done()
			if err := in.SetKeyWeight(ctx, args[0], args[1], weight); err != nil {
				return err
			}
			return a.emit(actionResult{Action: "weighted", Queue: args[0], Key: args[1], Weight: &weight}, func(w io.Writer) {
				if weight == 0 {
					fmt.Fprintf(w, "paused key %q of %s\n", args[1], printable(args[0]))
					return
				}
				fmt.Fprintf(w, "weighted key %q of %s: %d turns per round\n", args[1], printable(args[0]), weight)
			})
		},
	}
}

// queueKeycap is `hourglass queue keycap QUEUE KEY N|default`: set the
// concurrency cap of a key of a fair queue at run time.
func (a *app) queueKeycap() *cobra.Command {
	return &cobra.Command{
		Use:   "keycap QUEUE KEY N|default",
		Short: "Cap the tasks of a key of a fair queue running at once (0: no cap; default: the queue's)",
		Long: `Give a key (a task id's hash tag, client.Task.Key) of a fair queue a
concurrency cap of its own: at most N of its tasks hold a permit at once
across every worker. A task takes its key's permit when it enters the
queue's window, before any worker claims it, and gives it back when it
is settled or its lease runs out: a key at its cap has its tasks wait,
unclaimed, while the other keys' tasks run. N 0 lifts the queue's
default cap (queues.<q>.key_concurrency) for the key; "default" drops
the key's own cap. It takes effect at once. The cap counts a key's tasks
in one shard: it holds across the cluster once the deployment places
tasks by key (hourglass shards resize N --placement key). KEY "" is the
keyless tasks' key, which the default does not cap.`,
		Args: exactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := strconv.Atoi(args[2])
			if args[2] != "default" && (err != nil || n < 0 || n > inspect.MaxKeyConcurrency) {
				return usagef("N must be a whole number from 0 to %d, or default", inspect.MaxKeyConcurrency)
			}
			in, ctx, done, err := a.session(cmd)
			if err != nil {
				return err
			}
			defer done()
			res := actionResult{Action: "capped", Queue: args[0], Key: args[1]}
			if args[2] == "default" {
				err = in.ClearKeyConcurrency(ctx, args[0], args[1])
				res.Action = "uncapped"
			} else {
				err = in.SetKeyConcurrency(ctx, args[0], args[1], n)
				res.Concurrency = &n
			}
			if err != nil {
				return err
			}
			return a.emit(res, func(w io.Writer) {
				switch {
				case res.Concurrency == nil:
					fmt.Fprintf(w, "key %q of %s: the queue's default cap applies\n", args[1], printable(args[0]))
				case n == 0:
					fmt.Fprintf(w, "key %q of %s: no cap\n", args[1], printable(args[0]))
				default:
					fmt.Fprintf(w, "capped key %q of %s: at most %d running at once\n", args[1], printable(args[0]), n)
				}
			})
		},
	}
}

// queueKeyrate is `hourglass queue keyrate QUEUE KEY --rate N [--period
// D] [--burst B]` or `--default`: set the rate of a key of a fair queue at
// run time.
func (a *app) queueKeyrate() *cobra.Command {
	var (
		r   inspect.KeyRate
		def bool
	)
	cmd := &cobra.Command{
		Use:   "keyrate QUEUE KEY (--rate N [--period D] [--burst B] [--kind K] | --default)",
		Short: "Limit the tasks of a key of a fair queue starting per period (--rate 0: no rate; --default: the queue's)",
		Long: `Give a key (a task id's hash tag, client.Task.Key) of a fair queue a rate
of its own: at most N of its tasks enter the queue's window per --period
(default 1s), by the limiter --kind names, in the key's shard:
token_bucket (the default: N per period on average, --burst (default 1)
at once after a quiet time), leaky_bucket (evenly spaced, one each
period/N), fixed_window (at most N in each period, aligned on the
epoch) or sliding_window (at most N in any period). The token is taken when a task
enters the window, before any worker pops it: a key out of tokens has its
tasks wait, unclaimed, and the shard's scheduler lets its next task in
when its next token comes. --rate 0 lifts the queue's default rate
(queues.<q>.key_rate_limit) for the key; --default drops the key's own.
It takes effect at once. Like the caps, it holds across the cluster once
the deployment places tasks by key (hourglass shards resize N
--placement key).`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if def == cmd.Flags().Changed("rate") {
				return usagef("give --rate N or --default")
			}
			if r.Rate < 0 || r.Rate > inspect.MaxKeyRate || r.Burst < 0 || r.Period < 0 || r.Period%time.Millisecond != 0 {
				return usagef("--rate must be 0..%d, --burst 0 or more, --period a whole number of milliseconds", inspect.MaxKeyRate)
			}
			in, ctx, done, err := a.session(cmd)
			if err != nil {
				return err
			}
			defer done()
			res := actionResult{Action: "rated", Queue: args[0], Key: args[1]}
			if def {
				err = in.ClearKeyRate(ctx, args[0], args[1])
				res.Action = "unrated"
			} else {
				if r.Rate > 0 {
					r.Period, r.Burst = cmp.Or(r.Period, time.Second), cmp.Or(r.Burst, 1)
				}
				err = in.SetKeyRate(ctx, args[0], args[1], r)
				res.Rate = &r
			}
			if err != nil {
				return err
			}
			return a.emit(res, func(w io.Writer) {
				switch {
				case res.Rate == nil:
					fmt.Fprintf(w, "key %q of %s: the queue's default rate applies\n", args[1], printable(args[0]))
				case r.Rate == 0:
					fmt.Fprintf(w, "key %q of %s: no rate\n", args[1], printable(args[0]))
				case r.Kind != "" && r.Kind != "token_bucket":
					fmt.Fprintf(w, "rated key %q of %s: %d per %s by a %s\n", args[1], printable(args[0]), r.Rate, r.Period, strings.ReplaceAll(r.Kind, "_", " "))
				default:
					fmt.Fprintf(w, "rated key %q of %s: %d per %s, bursts of %d\n", args[1], printable(args[0]), r.Rate, r.Period, r.Burst)
				}
			})
		},
	}
	f := cmd.Flags()
	f.IntVar(&r.Rate, "rate", 0, "tasks of the key entering the window per --period (0: no rate for the key)")
	f.DurationVar(&r.Period, "period", 0, "period of --rate (0: 1s)")
	f.IntVar(&r.Burst, "burst", 0, "tasks of the key entering at once after a quiet time (0: 1; token_bucket only)")
	f.StringVar(&r.Kind, "kind", "", "the limiter: token_bucket (the default), leaky_bucket, fixed_window or sliding_window")
	f.BoolVar(&def, "default", false, "drop the key's own rate: the queue's applies")
	return cmd
}
