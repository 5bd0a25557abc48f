package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/periodic"
)

// schedules returns the periodic schedules of the configuration: the CLI
// reads the schedulers' config file, and only it says which schedules
// exist (Redis holds their state, not their definitions).
func (a *app) schedules() ([]*periodic.Compiled, error) {
	cfg, err := a.load()
	if err != nil {
		return nil, err
	}
	defs, err := cfg.Schedules()
	if err != nil { // validated by load already; kept for safety
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	return defs, nil
}

func (a *app) schedulesCmd() *cobra.Command {
	var next int
	cmd := &cobra.Command{
		Use:   "schedules",
		Short: "The configured periodic schedules: last and next occurrences, pause",
		Long: `The periodic schedules of the configuration (section periodic, as the
schedulers read it), each with its home shard, the last occurrence its
shard's owner recorded (fired or skipped), whether it is paused, and its
next occurrences from now (--next of them; the table shows the first).
Schedules that Redis remembers but the configuration no longer declares
are not listed.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			defs, err := a.schedules()
			if err != nil {
				return err
			}
			in, ctx, done, err := a.session(cmd)
			if err != nil {
				return err
			}
			defer done()
			ss, err := in.Schedules(ctx, defs, time.Now(), next)
			if err != nil {
				return err
			}
			return a.emit(ss, func(w io.Writer) { scheduleTable(w, ss) })
		},
	}
	cmd.Flags().IntVar(&next, "next", 3, fmt.Sprintf("next occurrences to compute per schedule, 0..%d", inspect.MaxNext))
	return cmd
}

func scheduleTable(w io.Writer, ss []inspect.ScheduleInfo) {
	row(w, "NAME", "QUEUE", "SPEC", "TZ", "LAST FIRED", "NEXT", "PAUSED")
	for _, s := range ss {
		next, paused := "-", "-"
		if len(s.Next) > 0 {
			next = when(s.Next[0])
		}
		if s.Paused {
			paused = "since " + when(s.PausedAt)
		}
		row(w, s.Name, s.Queue, s.Spec, orDash(s.TimeZone), when(s.LastFired), next, paused)
	}
}

func (a *app) scheduleCmd() *cobra.Command {
	return noun("schedule", "Pause and resume periodic schedules", a.schedulePause(true), a.schedulePause(false))
}

func (a *app) schedulePause(pause bool) *cobra.Command {
	use, short, verb := "resume NAME", "Resume a paused periodic schedule: its next occurrence fires", "resumed"
	if pause {
		use, short, verb = "pause NAME", "Pause a periodic schedule: its occurrences are skipped until resumed", "paused"
	}
	return &cobra.Command{
		Use: use, Short: short, Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			defs, err := a.schedules()
			if err != nil {
				return err
			}
			// A pause of an unknown name would be a typo that pauses
			// nothing; a resume is allowed, to clear the pause of a
			// schedule since removed from the configuration.
			names := make([]string, len(defs))
			for k, d := range defs {
				names[k] = d.Name
			}
			if pause && !slices.Contains(names, name) {
				return fmt.Errorf("%w: schedule %q is not in the configuration's periodic section (configured: %s)", errUsage, name, namesText(names))
			}
			in, ctx, done, err := a.session(cmd)
			if err != nil {
				return err
			}
			defer done()
			if pause {
				err = in.PauseSchedule(ctx, name)
			} else {
				err = in.ResumeSchedule(ctx, name)
			}
			if err != nil {
				return err
			}
			return a.done(actionResult{Action: verb, Schedule: name})
		},
	}
}

// namesText lists names for an error message.
func namesText(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
