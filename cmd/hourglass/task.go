package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/hourglass-sched/hourglass"
	"github.com/hourglass-sched/hourglass/inspect"
)

func (a *app) taskCmd() *cobra.Command {
	return noun("task", "List, show, cancel, reschedule and replace tasks, and change their priority", a.taskLs(), a.taskShow(), a.taskCancel(),
		a.taskReschedule(), a.taskReplace(), a.taskPriority())
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

// pageFunc returns the page of a listing that starts at cursor.
type pageFunc func(ctx context.Context, in *inspect.Inspector, cursor string) (inspect.Page, error)

// listing prints a listing as its pages arrive: one page, or with --all
// every page to the end, each call bounded by --timeout. It holds one
// page at a time: each is written (and flushed) before the next is
// fetched, so memory does not grow with the listing. -o json writes one
// JSON object of inspect.Page's shape, {"tasks": [...], "cursor": "..."},
// a task at a time; the table writes each page's rows, aligned within the
// page, under one header. A call that fails after a page was written
// closes the output with the cursor to go on from (the JSON's "cursor",
// the table's "more:" line) and returns the error.
func (a *app) listing(ctx context.Context, p pageFlags, next pageFunc, header []any, cells func(inspect.Task) []any) error {
	in, err := a.inspector()
	if err != nil {
		return err
	}
	listed := 0
	err = a.stream(ctx, p, func(ctx context.Context, cursor string) (inspect.Page, error) {
		page, err := next(ctx, in, cursor)
		listed += len(page.Tasks)
		return page, err
	}, header, cells)
	if err == nil && listed == 0 && p.cursor == "" {
		a.warnEmptyNamespace(ctx, in, nil)
	}
	return err
}

// stream is listing's loop, with the Inspector bound in next.
func (a *app) stream(ctx context.Context, p pageFlags, next func(ctx context.Context, cursor string) (inspect.Page, error), header []any, cells func(inspect.Task) []any) error {
	var out pageWriter = &tablePages{w: a.out, header: header, cells: cells}
	if a.output == "json" {
		out = &jsonPages{w: bufio.NewWriter(a.out)}
	}
	cur, wrote := p.cursor, false
	for {
		cctx, cancel := context.WithTimeout(ctx, a.timeout)
		page, err := next(cctx, cur)
		cancel()
		if err != nil {
			if wrote {
				if cerr := out.end(cur); cerr != nil {
					return errors.Join(err, cerr)
				}
			}
			return err
		}
		if err := out.page(page.Tasks); err != nil {
			return err
		}
		wrote, cur = true, page.Cursor
		if !p.all || cur == "" {
			return out.end(cur)
		}
	}
}

// pageWriter writes a listing a page at a time: page writes and flushes
// one page's tasks, end closes the listing with the cursor that goes on
// ("" when it is complete).
type pageWriter interface {
	page(tasks []inspect.Task) error
	end(cursor string) error
}

// jsonPages writes the JSON of inspect.Page, indented as -o json
// indents, a task at a time.
type jsonPages struct {
	w       *bufio.Writer
	started bool // the object's opening written
	n       int  // tasks written
}

// open writes the object's opening, once.
func (j *jsonPages) open() {
	if !j.started {
		j.w.WriteString("{\n  \"tasks\": [")
		j.started = true
	}
}

func (j *jsonPages) page(tasks []inspect.Task) error {
	j.open()
	for _, t := range tasks {
		b, err := json.MarshalIndent(t, "    ", "  ")
		if err != nil {
			return err
		}
		if j.n > 0 {
			j.w.WriteString(",")
		}
		j.w.WriteString("\n    ")
		j.w.Write(b)
		j.n++
	}
	return j.w.Flush()
}

func (j *jsonPages) end(cursor string) error {
	j.open()
	if j.n > 0 {
		j.w.WriteString("\n  ")
	}
	c, _ := json.Marshal(cursor)
	j.w.WriteString("],\n  \"cursor\": ")
	j.w.Write(c)
	j.w.WriteString("\n}\n")
	return j.w.Flush()
}

// tablePages writes a listing's table: the header above the first page,
// each page's rows aligned within the page.
type tablePages struct {
	w       io.Writer
	header  []any
	cells   func(inspect.Task) []any
	started bool
}

func (tp *tablePages) page(tasks []inspect.Task) error {
	tw := tabwriter.NewWriter(tp.w, 0, 4, 2, ' ', 0)
	if !tp.started {
		row(tw, tp.header...)
		tp.started = true
	}
	for _, t := range tasks {
		row(tw, tp.cells(t)...)
	}
	return tw.Flush()
}

func (tp *tablePages) end(cursor string) error {
	if cursor != "" {
		fmt.Fprintln(tp.w)
		fmt.Fprintln(tp.w, printable("more: --cursor "+cursor))
	}
	return nil
}

func (a *app) taskLs() *cobra.Command {
	var queue, state string
	var p pageFlags
	cmd := &cobra.Command{
		Use: "ls", Short: "List tasks in one state, a page at a time", Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.listing(cmd.Context(), p, func(ctx context.Context, in *inspect.Inspector, cur string) (inspect.Page, error) {
				return in.ListTasks(ctx, inspect.ListOptions{Queue: queue, State: inspect.State(state), Cursor: cur, Limit: p.limit})
			}, []any{"ID", "QUEUE", "STATE", "SHARD", "ATTEMPTS", "DUE", "LAST ERROR"}, func(t inspect.Task) []any {
				last := t.LastError
				if t.Dead != nil && last == "" {
					last = t.Dead.Error
				}
				return []any{t.ID, t.Queue, t.State, t.Shard, t.Attempts, when(t.Due), last}
			})
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

func (a *app) taskReschedule() *cobra.Command {
	var at string
	cmd := &cobra.Command{
		Use:   "reschedule ID --at WHEN",
		Short: "Move a pending task (scheduled, or ready and not taken) to another due time",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if at == "" {
				return usagef("reschedule needs --at")
			}
			due, err := parseWhen(at, false)
			if err != nil {
				return err
			}
			in, ctx, done, err := a.session(cmd)
			if err != nil {
				return err
			}
			defer done()
			due, err = in.Reschedule(ctx, args[0], due)
			if err != nil {
				return err
			}
			return a.done(actionResult{Action: "rescheduled", ID: args[0], Due: due})
		},
	}
	cmd.Flags().StringVar(&at, "at", "", "the new due time: RFC 3339, or a delay (10m = in ten minutes)")
	return cmd
}

func (a *app) taskPriority() *cobra.Command {
	return &cobra.Command{
		Use:   "priority ID high|normal|low",
		Short: "Change a pending task's priority (a fair queue's waiting task moves to the end of its key's tasks of that level)",
		Args:  exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := hourglass.ParsePriority(args[1])
			if err != nil {
				return usagef("%v", err)
			}
			in, ctx, done, err := a.session(cmd)
			if err != nil {
				return err
			}
			defer done()
			if err := in.SetPriority(ctx, args[0], p); err != nil {
				return err
			}
			return a.done(actionResult{Action: "set the priority to " + p.String() + " of", ID: args[0]})
		},
	}
}

func (a *app) taskReplace() *cobra.Command {
	var payload, file string
	cmd := &cobra.Command{
		Use:   "replace ID (--payload TEXT | --payload-file FILE)",
		Short: "Give a pending task a new payload (a ready one keeps its turn)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			data := []byte(payload)
			switch {
			case cmd.Flags().Changed("payload") == (file != ""):
				return usagef("replace needs one of --payload and --payload-file")
			case file != "":
				var err error
				if data, err = a.readFile(file); err != nil {
					return err
				}
			}
			in, ctx, done, err := a.session(cmd)
			if err != nil {
				return err
			}
			defer done()
			if err := in.Replace(ctx, args[0], data); err != nil {
				return err
			}
			return a.done(actionResult{Action: "replaced the payload of", ID: args[0]})
		},
	}
	cmd.Flags().StringVar(&payload, "payload", "", "the new payload, as text")
	cmd.Flags().StringVar(&file, "payload-file", "", "read the new payload from this file (- for standard input)")
	return cmd
}

// readFile reads a file named on the command line, "-" for standard input.
func (a *app) readFile(name string) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(a.in)
	}
	return os.ReadFile(name)
}
