package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hourglass-sched/hourglass/inspect"
)

func (a *app) dlqCmd() *cobra.Command {
	return noun("dlq", "List, show, replay and purge dead letters", a.dlqLs(), a.dlqShow(), a.dlqBulk(true), a.dlqBulk(false))
}

// filterFlags select dead letters.
type filterFlags struct {
	queue, reason, errSub, since, until string
}

func (f *filterFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.queue, "queue", "", "only this queue")
	fl.StringVar(&f.reason, "reason", "", `only this reason (e.g. "max retries exhausted", "lease expired", "not retryable")`)
	fl.StringVar(&f.errSub, "error", "", "only dead letters whose last error contains this text")
	fl.StringVar(&f.since, "since", "", "dead since (RFC 3339, or a duration: 1h = an hour ago)")
	fl.StringVar(&f.until, "until", "", "dead before (RFC 3339, or a duration ago)")
}

func (f filterFlags) filter() (inspect.DeadFilter, error) {
	since, err := parseWhen(f.since, true)
	if err != nil {
		return inspect.DeadFilter{}, err
	}
	until, err := parseWhen(f.until, true)
	if err != nil {
		return inspect.DeadFilter{}, err
	}
	return inspect.DeadFilter{Queue: f.queue, Reason: f.reason, ErrorContains: f.errSub, Since: since, Until: until}, nil
}

func (f filterFlags) empty() bool { return f == filterFlags{} }

// filterText describes the dead letters f selects, for a confirmation:
// `of queue "mail", with reason "lease expired"`.
func filterText(f inspect.DeadFilter) string {
	var parts []string
	if f.Queue != "" {
		parts = append(parts, fmt.Sprintf("of queue %q", f.Queue))
	}
	if f.Reason != "" {
		parts = append(parts, fmt.Sprintf("with reason %q", f.Reason))
	}
	if f.ErrorContains != "" {
		parts = append(parts, fmt.Sprintf("whose last error contains %q", f.ErrorContains))
	}
	if !f.Since.IsZero() {
		parts = append(parts, "dead since "+when(f.Since))
	}
	if !f.Until.IsZero() {
		parts = append(parts, "dead before "+when(f.Until))
	}
	return strings.Join(parts, ", ")
}

func (a *app) dlqLs() *cobra.Command {
	var ff filterFlags
	var p pageFlags
	cmd := &cobra.Command{
		Use: "ls", Short: "List dead letters, newest first across the shards", Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := ff.filter()
			if err != nil {
				return err
			}
			return a.listing(cmd.Context(), p, func(ctx context.Context, in *inspect.Inspector, cur string) (inspect.Page, error) {
				return in.ListDead(ctx, f, cur, p.limit)
			}, []any{"ID", "QUEUE", "DEAD SINCE", "ATTEMPTS", "REASON", "ERROR"}, func(t inspect.Task) []any {
				return []any{t.ID, t.Queue, when(t.Dead.At), t.Attempts, t.Dead.Reason, t.Dead.Error}
			})
		},
	}
	ff.add(cmd)
	p.add(cmd)
	return cmd
}

func (a *app) dlqShow() *cobra.Command {
	return a.showCmd("Show a dead letter: payload, attempts, reason, last error, time", (*inspect.Inspector).Dead)
}

// bulkResult is the JSON of a bulk replay or purge.
type bulkResult struct {
	Action   string           `json:"action"`
	Progress inspect.Progress `json:"progress"`
}

// dlqBulk is dlq replay or dlq purge: of one ID, of --all, or of the
// dead letters the filter flags select.
func (a *app) dlqBulk(replay bool) *cobra.Command {
	var ff filterFlags
	var all bool
	var at string
	verb, past := "purge", "purged"
	short := "Delete dead letters with their data (their ids can be enqueued again)"
	if replay {
		verb, past = "replay", "replayed"
		short = "Put dead letters back, due now or --at; attempts restart at 0"
	}
	cmd := &cobra.Command{
		Use:   verb + " [ID | --all | filters]",
		Short: short,
		Args:  maxArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			due, err := parseWhen(at, false)
			if err != nil {
				return err
			}
			if len(args) == 1 {
				if all || !ff.empty() {
					return usagef("give an ID, or --all, or filters")
				}
				return a.dlqOne(cmd, replay, args[0], due)
			}
			if all == !ff.empty() {
				return usagef("%s needs an ID, --all, or filter flags (not --all with filters)", verb)
			}
			f, err := ff.filter()
			if err != nil {
				return err
			}
			what := verb + " every dead letter"
			if !all {
				what = fmt.Sprintf("%s the dead letters %s", verb, filterText(f))
			}
			if err := a.confirm(what); err != nil {
				return err
			}
			return a.dlqMany(cmd, replay, f, due, past)
		},
	}
	ff.add(cmd)
	cmd.Flags().BoolVar(&all, "all", false, "every dead letter")
	cmd.Flags().BoolVarP(&a.yes, "yes", "y", false, "do not ask for confirmation")
	if replay {
		cmd.Flags().StringVar(&at, "at", "", "due time: RFC 3339, or a delay (10m = in ten minutes); default now")
	}
	return cmd
}

func (a *app) dlqOne(cmd *cobra.Command, replay bool, id string, at time.Time) error {
	in, ctx, done, err := a.session(cmd)
	if err != nil {
		return err
	}
	defer done()
	verb := "purged"
	if replay {
		verb, err = "replayed", in.Replay(ctx, id, at)
	} else {
		err = in.Purge(ctx, id)
	}
	if err != nil {
		return err
	}
	return a.done(actionResult{Action: verb, ID: id})
}

func (a *app) dlqMany(cmd *cobra.Command, replay bool, f inspect.DeadFilter, at time.Time, past string) error {
	in, err := a.inspector()
	if err != nil {
		return err
	}
	// No overall timeout: each call is bounded (500 dead letters of one
	// shard); Ctrl-C stops between calls.
	var p inspect.Progress
	if replay {
		p, err = in.ReplayDead(cmd.Context(), f, at, a.progress(past))
	} else {
		p, err = in.PurgeDead(cmd.Context(), f, a.progress(past))
	}
	if err != nil {
		return fmt.Errorf("%w (after %d %s)", err, p.Done, past)
	}
	return a.emit(bulkResult{Action: past, Progress: p}, func(w io.Writer) {
		fmt.Fprintf(w, "%s %d dead letters (%d examined in %d calls)\n", past, p.Done, p.Scanned, p.Calls)
	})
}
