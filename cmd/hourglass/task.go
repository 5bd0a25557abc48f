package main

import (
	"context"
	"io"

	"github.com/spf13/cobra"

	"github.com/hourglass-sched/hourglass/inspect"
)

func (a *app) taskCmd() *cobra.Command {
	return noun("task", "List, show and cancel tasks", a.taskLs(), a.taskShow(), a.taskCancel())
}

// pageFlags are the paging flags of ls verbs.
type pageFlags struct {
	limit  int
	cursor string
	all    bool
}

func (p *pageFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.IntVar(&p.limit, "limit", inspect.DefaultLimit, "tasks per page (at most 1000)")
	f.StringVar(&p.cursor, "cursor", "", "continue after the page that printed this cursor")
	f.BoolVar(&p.all, "all", false, "page through to the end")
}

// collect lists with next, each call bounded by --timeout, one page or
// (--all) through to the end.
func (a *app) collect(ctx context.Context, p pageFlags, next func(ctx context.Context, in *inspect.Inspector, cursor string) (inspect.Page, error)) (inspect.Page, error) {
	in, err := a.inspector()
	if err != nil {
		return inspect.Page{}, err
	}
	out := inspect.Page{Tasks: []inspect.Task{}, Cursor: p.cursor}
	for {
		cctx, cancel := context.WithTimeout(ctx, a.timeout)
		page, err := next(cctx, in, out.Cursor)
		cancel()
		if err != nil {
			return out, err
		}
		out.Tasks = append(out.Tasks, page.Tasks...)
		out.Cursor = page.Cursor
		if !p.all || page.Cursor == "" {
			return out, nil
		}
	}
}

func (a *app) printPage(p inspect.Page) error {
	return a.emit(p, func(w io.Writer) {
		row(w, "ID", "QUEUE", "STATE", "SHARD", "ATTEMPTS", "DUE", "LAST ERROR")
		for _, t := range p.Tasks {
			last := t.LastError
			if t.Dead != nil && last == "" {
				last = t.Dead.Error
			}
			row(w, t.ID, t.Queue, t.State, t.Shard, t.Attempts, when(t.Due), last)
		}
		if p.Cursor != "" {
			row(w, "")
			row(w, "more: --cursor "+p.Cursor)
		}
	})
}

func (a *app) taskLs() *cobra.Command {
	var queue, state string
	var p pageFlags
	cmd := &cobra.Command{
		Use: "ls", Short: "List tasks in one state, a page at a time", Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			page, err := a.collect(cmd.Context(), p, func(ctx context.Context, in *inspect.Inspector, cur string) (inspect.Page, error) {
				return in.ListTasks(ctx, inspect.ListOptions{Queue: queue, State: inspect.State(state), Cursor: cur, Limit: p.limit})
			})
			if err != nil {
				return err
			}
			return a.printPage(page)
		},
	}
	cmd.Flags().StringVar(&queue, "queue", "", "only this queue (required for --state ready)")
	cmd.Flags().StringVar(&state, "state", "scheduled", "scheduled, ready, active or dead")
	p.add(cmd)
	return cmd
}

func (a *app) taskShow() *cobra.Command {
	return a.showCmd("Show a task in any state", (*inspect.Inspector).Task)
}

// showCmd is a "show ID" verb that prints the task lookup returns.
func (a *app) showCmd(short string, lookup func(*inspect.Inspector, context.Context, string) (inspect.Task, error)) *cobra.Command {
	return &cobra.Command{
		Use: "show ID", Short: short, Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, ctx, done, err := a.session(cmd)
			if err != nil {
				return err
			}
			defer done()
			t, err := lookup(in, ctx, args[0])
			if err != nil {
				return err
			}
			return a.emit(t, func(w io.Writer) { showTask(w, t) })
		},
	}
}

func (a *app) taskCancel() *cobra.Command {
	return &cobra.Command{
		Use: "cancel ID", Short: "Delete a task that is not running (scheduled, ready or dead)", Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, ctx, done, err := a.session(cmd)
			if err != nil {
				return err
			}
			defer done()
			st, err := in.Cancel(ctx, args[0])
			if err != nil {
				return err
			}
			return a.done(actionResult{Action: "cancelled", ID: args[0], State: string(st)})
		},
	}
}
