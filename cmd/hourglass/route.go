package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/hourglass-sched/hourglass/inspect"
)

// queueRoute is `hourglass queue route QUEUE`: which workers may take a
// queue's tasks, set at run time.
func (a *app) queueRoute() *cobra.Command {
	var (
		r     inspect.Routing
		share inspect.Share
		clear bool
	)
	cmd := &cobra.Command{
		Use:   "route QUEUE (--not-tag T | --tag T | --version V | --share P (--share-tag T | --share-version V)...)... | --clear",
		Short: "Set which workers may take a queue's tasks (canary: --not-tag canary), or --clear",
		Long: `Set, cluster-wide and at run time, which workers may take a queue's
tasks, by the version and tags each worker carries (worker.version and
worker.tags; docs/operations.md, "Canary workers"): --not-tag canary
keeps the canaries off the queue, --version v1.4.2 (as hourglass ps
lists it) admits only that version, --tag canary only the canaries. Flags repeat (--version a
--version b: either). Each worker re-reads the routing within a second
of the change: one it excludes stops taking the queue's tasks (a task
popped at that moment is given back before its handler starts; running
ones finish). queue ls then counts the workers that may take the queue's
tasks (WORKERS); none is "no eligible worker", and its tasks wait.
--share 10 --share-tag canary gives the workers tagged canary (or, with
--share-version, of that version) 10% of the queue's tasks and the
others the rest, by shard: 10% of 16 shards is one shard, and a second
one for 60% of every 10 s (docs/operations.md, "A share for the
canaries").
--clear admits every worker again.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if share.Percent != 0 || len(share.Tags)+len(share.Versions) > 0 {
				r.Share = &share
			}
			if r.IsZero() == !clear {
				return usagef("give --not-tag, --tag, --version or --share, or --clear, not both")
			}
			in, ctx, done, err := a.session(cmd)
			if err != nil {
				return err
			}
			defer done()
			if clear {
				if err := in.ClearRouting(ctx, args[0]); err != nil {
					return err
				}
				return a.done(actionResult{Action: "cleared the routing of", Queue: args[0]})
			}
			if err := in.SetRouting(ctx, args[0], r); err != nil {
				return err
			}
			return a.emit(struct {
				Action  string          `json:"action"`
				Queue   string          `json:"queue"`
				Routing inspect.Routing `json:"routing"`
			}{"routed", args[0], r}, func(w io.Writer) {
				fmt.Fprintf(w, "routed %s to workers %s\n", printable(args[0]), r.String())
			})
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&r.NotTags, "not-tag", nil, "exclude the workers carrying this tag (canary)")
	f.StringArrayVar(&r.Tags, "tag", nil, "admit only the workers carrying this tag (all of those given)")
	f.StringArrayVar(&r.Versions, "version", nil, "admit only the workers of this version (any of those given)")
	f.IntVar(&share.Percent, "share", 0, "give the canary set (--share-tag, --share-version) this percentage of the tasks, 1..99")
	f.StringArrayVar(&share.Tags, "share-tag", nil, "with --share: the canary set holds the workers carrying this tag (any of those given)")
	f.StringArrayVar(&share.Versions, "share-version", nil, "with --share: the canary set holds the workers of this version (any of those given)")
	f.BoolVar(&clear, "clear", false, "admit every worker again")
	return cmd
}

// workersText renders a queue's eligible workers for the tables.
func workersText(q inspect.Queue) string {
	switch {
	case q.Name == "":
		return "-"
	case q.RoutingError != "":
		return "none eligible (unreadable routing: " + q.RoutingError + ")"
	}
	switch q.Workers {
	case -1:
		return "?"
	case 0:
		return "none eligible"
	}
	if q.Routing != nil && q.Routing.Share != nil {
		switch q.Canaries {
		case 0:
			return fmt.Sprintf("%d, no canary: its share waits", q.Workers)
		case q.Workers:
			return fmt.Sprintf("%d, all canaries: the rest waits", q.Workers)
		}
		return fmt.Sprintf("%d (%d canary)", q.Workers, q.Canaries)
	}
	return fmt.Sprint(q.Workers)
}
