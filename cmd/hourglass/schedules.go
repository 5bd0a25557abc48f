package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hourglass-sched/hourglass"
	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/periodic"
)

// schedules returns the periodic schedules of the configuration: the CLI
// reads the schedulers' config file, and only it says which schedules
// are configured (Redis holds their state, and the definitions of those
// registered at run time only; see registered).
func (a *app) schedules() ([]*periodic.Compiled, error) {
	cfg, err := a.load()
	if err != nil {
		return nil, err
	}
	defs, err := cfg.Schedules()
	if err != nil { // validated by load already; kept for safety
		return nil, ofKind(errUsage, err)
	}
	return defs, nil
}

// Where a schedule that schedules lists is defined.
const (
	sourceConfig   = "config"
	sourceRegistry = "registry"
)

// scheduleRow is one schedule as schedules lists it: its state, and
// where it is defined.
type scheduleRow struct {
	inspect.ScheduleInfo
	// Source is sourceConfig or sourceRegistry.
	Source string `json:"source"`
}

// registered returns the schedules registered at run time
// (inspect.SetSchedule) whose names the configured ones, defs, do not
// use: those the schedulers fire besides their configuration's, which
// wins on a shared name (scheduler.withRegistered). Entries that do not
// decode are left out with a warning, as the schedulers leave them out.
func (a *app) registered(ctx context.Context, in *inspect.Inspector, defs []*periodic.Compiled) ([]*periodic.Compiled, error) {
	reg, err := in.RegisteredSchedules(ctx)
	if err != nil {
		if reg == nil {
			return nil, err
		}
		fmt.Fprintf(a.errOut, "hourglass: warning: registered schedules not fired (replace them with schedule set, or schedule rm them): %s\n", errText(err))
	}
	return periodic.Unshadowed(defs, reg), nil
}

// scheduleSession returns the configured schedules and a session, as
// a.session does.
func (a *app) scheduleSession(cmd *cobra.Command) ([]*periodic.Compiled, *inspect.Inspector, context.Context, func(), error) {
	defs, err := a.schedules()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	in, ctx, done, err := a.session(cmd)
	return defs, in, ctx, done, err
}

// configured reports whether defs has a schedule called name.
func configured(defs []*periodic.Compiled, name string) bool {
	return slices.ContainsFunc(defs, func(d *periodic.Compiled) bool { return d.Name == name })
}

// names returns the names of defs.
func names(defs []*periodic.Compiled) []string {
	out := make([]string, len(defs))
	for k, d := range defs {
		out[k] = d.Name
	}
	return out
}

func (a *app) schedulesCmd() *cobra.Command {
	var next int
	cmd := &cobra.Command{
		Use:   "schedules",
		Short: "The periodic schedules, configured and registered: last and next occurrences, pause",
		Long: `The periodic schedules the schedulers fire, by name: those of the
configuration (section periodic, as the schedulers read it; SOURCE config)
and those registered at run time (schedule set, inspect.SetSchedule;
SOURCE registry) whose names the configuration does not use, since it
wins. Each with its home shard, the last occurrence its shard's owner
fired (its task enqueued: an occurrence skipped while paused does not
count; the JSON also has last_recorded, fired or skipped), whether it is
paused, and its next occurrences from now (--next of them; the table
shows the first). Schedules that Redis remembers but neither declares
are not listed; when nothing is declared and Redis records some, it
names them and exits 3: pass the schedulers' configuration with -c.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			defs, in, ctx, done, err := a.scheduleSession(cmd)
			if err != nil {
				return err
			}
			defer done()
			reg, err := a.registered(ctx, in, defs)
			if err != nil {
				return err
			}
			all := slices.SortedFunc(slices.Values(slices.Concat(defs, reg)), func(x, y *periodic.Compiled) int { return strings.Compare(x.Name, y.Name) })
			ss, err := in.Schedules(ctx, all, time.Now(), next)
			if err != nil {
				return err
			}
			rows := make([]scheduleRow, len(ss))
			for k, s := range ss {
				rows[k] = scheduleRow{ScheduleInfo: s, Source: sourceRegistry}
				if configured(defs, s.Name) {
					rows[k].Source = sourceConfig
				}
			}
			if len(rows) == 0 {
				// Nothing declared: without the schedulers' configuration
				// the CLI cannot tell what a schedule is, only that Redis
				// records some.
				recorded, err := in.RecordedSchedules(ctx)
				if err != nil {
					return err
				}
				if len(recorded) > 0 {
					return fmt.Errorf("%w: no schedule declared: the configuration given has no periodic section and none is registered at run time, "+
						"but Redis records the state of %d (%s): pass the schedulers' configuration with -c", inspect.ErrNotFound, len(recorded), strings.Join(recorded, ", "))
				}
			}
			return a.emit(rows, func(w io.Writer) { scheduleTable(w, rows) })
		},
	}
	cmd.Flags().IntVar(&next, "next", 3, fmt.Sprintf("next occurrences to compute per schedule, 0..%d", inspect.MaxNext))
	return cmd
}

func scheduleTable(w io.Writer, rows []scheduleRow) {
	row(w, "NAME", "SOURCE", "QUEUE", "SPEC", "TZ", "LAST FIRED", "NEXT", "PAUSED")
	for _, s := range rows {
		next, paused := "-", "-"
		if len(s.Next) > 0 {
			next = when(s.Next[0])
		}
		if s.Paused {
			paused = "since " + when(s.PausedAt)
		}
		row(w, s.Name, s.Source, s.Queue, s.Spec, orDash(s.TimeZone), when(s.LastFired), next, paused)
	}
}

func (a *app) scheduleCmd() *cobra.Command {
	return noun("schedule", "Register, remove, pause and resume periodic schedules, and show their history",
		a.scheduleSet(), a.scheduleRm(), a.schedulePause(true), a.schedulePause(false), a.scheduleHistory())
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
			defs, in, ctx, done, err := a.scheduleSession(cmd)
			if err != nil {
				return err
			}
			defer done()
			// A pause or resume of an unknown name would be a typo that
			// does nothing; the pause of a schedule since removed can
			// still be resumed (cleared).
			if !configured(defs, name) {
				reg, err := a.registered(ctx, in, defs)
				if err != nil {
					return err
				}
				if !configured(reg, name) {
					clearing := false
					if !pause {
						paused, err := in.PausedSchedules(ctx)
						if err != nil {
							return err
						}
						_, clearing = paused[name]
					}
					if !clearing {
						return usagef("schedule %q is not in the configuration's periodic section (configured: %s) and not registered at run time (registered: %s)",
							name, namesText(names(defs)), namesText(names(reg)))
					}
				}
			}
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

// inConfig is the refusal of set and rm for a name the configuration
// defines: the schedulers fire the configured schedule whatever the
// registry holds under that name.
func inConfig(name, what string) error {
	return usagef("schedule %q is in the configuration's periodic section, which takes precedence over the registry: %s", name, what)
}

func (a *app) scheduleSet() *cobra.Command {
	var (
		s       periodic.Schedule
		payload string
		retries int
	)
	cmd := &cobra.Command{
		Use:   "set NAME --queue Q (--cron EXPR [--tz ZONE] | --interval D)",
		Short: "Register a periodic schedule at run time, or replace one so registered",
		Long: `Register a periodic schedule at run time (or replace the one registered
under NAME), with no scheduler restart: the schedulers hear of it at once
(or within 5 s) and the owner of its home shard fires it from its next
occurrence, as if it were configured. A replaced schedule keeps its
recorded state, so no occurrence fires twice. The queue must exist.

A NAME the configuration's periodic section defines is refused: the
configuration wins, so the registered definition would never fire.

The flags are the keys of a configured schedule (docs/periodic.md).
--timeout here is the tasks' timeout, not the command's bound (which
stays at its default of 30s for this verb).`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s.Name = args[0]
			if payload != "" {
				s.Payload = []byte(payload)
			}
			if cmd.Flags().Changed("max-retries") {
				s.MaxRetries = hourglass.Retries(retries)
			}
			defs, err := a.schedules()
			if err != nil {
				return err
			}
			if configured(defs, s.Name) {
				return inConfig(s.Name, "registering it would change nothing (change it in the configuration)")
			}
			if _, err := s.Compile(); err != nil { // before connecting, with the flags named
				return flagError(err)
			}
			in, ctx, done, err := a.session(cmd)
			if err != nil {
				return err
			}
			defer done()
			if err := in.SetSchedule(ctx, s); err != nil {
				return err
			}
			return a.done(actionResult{Action: "set", Schedule: s.Name, Queue: s.Queue})
		},
	}
	f := cmd.Flags()
	f.StringVar(&s.Queue, "queue", "", "queue of the tasks (required; it must exist)")
	f.StringVar(&s.Cron, "cron", "", "cron expression: 5 fields, 6 with seconds first, or a descriptor such as @hourly")
	f.StringVar(&s.TimeZone, "tz", "", "IANA time zone of --cron (default UTC)")
	f.DurationVar(&s.Interval, "interval", 0, "fixed period instead of --cron, at least 1s (at its whole multiples since the Unix epoch)")
	f.StringVar(&payload, "payload", "", "payload of every task, as text")
	f.DurationVar(&s.Jitter, "jitter", 0, "delay each task by up to this much, the same on every replica")
	f.IntVar(&retries, "max-retries", 0, "retries of the tasks, 0..1000 (0: never retried); left out, the queue's default")
	f.DurationVar(&s.Timeout, "timeout", 0, "lease of one attempt of the tasks (not the command's bound); 0 for the queue's default")
	f.StringVar((*string)(&s.CatchUp), "catch-up", "", "missed occurrences to fire: skip (default), latest or all")
	f.DurationVar(&s.CatchUpWindow, "catch-up-window", 0, "how far back --catch-up all looks (default 1h, at most 168h)")
	f.StringVar((*string)(&s.Overlap), "overlap", "", "allow (default) or skip: skip an occurrence while the previous one's task is stored")
	return cmd
}

// flagError returns a validation error of periodic.Schedule.Compile as a
// usage error naming the flag (or the NAME argument) at fault rather than
// the configuration key.
func flagError(err error) error {
	var pe *periodic.Error
	if !errors.As(err, &pe) {
		return ofKind(errUsage, err)
	}
	flag := "--" + strings.ReplaceAll(pe.Field, "_", "-")
	switch pe.Field {
	case "name":
		flag = "NAME"
	case "time_zone":
		flag = "--tz"
	}
	return usagef("schedule %q: %s: %s", pe.Schedule, flag, pe.Reason)
}

func (a *app) scheduleRm() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove a schedule registered at run time: it stops firing",
		Long: `Remove a schedule registered at run time (schedule set): the schedulers
stop firing it within moments. Its recorded state (last occurrence,
pause) stays, so registering it again fires no occurrence twice.

A NAME the configuration's periodic section defines is refused: remove it
there. Exit 3 if no schedule of that name is registered.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			defs, err := a.schedules()
			if err != nil {
				return err
			}
			if configured(defs, name) {
				return inConfig(name, "remove it there, and restart the schedulers")
			}
			if err := a.confirm(fmt.Sprintf("remove schedule %q (it stops firing)", name)); err != nil {
				return err
			}
			in, ctx, done, err := a.session(cmd)
			if err != nil {
				return err
			}
			defer done()
			if err := in.RemoveSchedule(ctx, name); err != nil {
				return err
			}
			return a.done(actionResult{Action: "removed", Schedule: name})
		},
	}
	cmd.Flags().BoolVarP(&a.yes, "yes", "y", false, "do not ask for confirmation")
	return cmd
}

// namesText lists names for an error message.
func namesText(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
