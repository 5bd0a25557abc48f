package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hourglass-sched/hourglass/inspect"
)

// psCmd is `hourglass ps`: the deployment's live schedulers and workers.
func (a *app) psCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "ps",
		Short: "List the live schedulers and workers: version, host, queues, busy slots",
		Long: `List the deployment's live processes (docs/operations.md, "Processes"):
each scheduler and worker with its id, version, host, pid, start time,
queues and, for a worker, its busy and total handler slots. A process is
listed while one of its Redis connections has sent a command within the
last ` + inspect.ProcessSilence.String() + `: a killed process disappears at once, a paused or
cut-off one within that bound. (An embedded worker whose client does not
name its connections is listed while its entry, written every minute, is
younger than that bound.)`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			in, ctx, done, err := a.session(cmd)
			if err != nil {
				return err
			}
			defer done()
			ps, err := in.Processes(ctx)
			if err != nil {
				return err
			}
			return a.emit(struct {
				Processes []inspect.Process `json:"processes"`
			}{ps}, func(w io.Writer) {
				row(w, "ROLE", "ID", "VERSION", "HOST", "PID", "STARTED", "BUSY", "QUEUES")
				for _, p := range ps {
					busy := "-"
					if p.Role == "worker" {
						busy = fmt.Sprintf("%d/%d", p.Busy, p.Slots)
					}
					v := p.Version
					if len(p.Tags) > 0 {
						v += " [" + strings.Join(p.Tags, " ") + "]" // a worker's tags: canary
					}
					row(w, p.Role, p.ID, v, p.Host, p.PID, when(p.Started), busy, queuesText(p))
				}
				if len(ps) == 0 {
					row(w, "(no live process: none runs, or none of this namespace)")
				}
			})
		},
	}
}

// queuesText renders a process's queues: "emails:10 hooks:50" for a
// worker (each with its slots), "emails hooks" for a scheduler.
func queuesText(p inspect.Process) string {
	names := make([]string, 0, len(p.Queues))
	for q := range p.Queues {
		names = append(names, q)
	}
	slices.Sort(names)
	for i, q := range names {
		if p.Role == "worker" {
			names[i] = fmt.Sprintf("%s:%d", q, p.Queues[q])
		}
	}
	return strings.Join(names, " ")
}
