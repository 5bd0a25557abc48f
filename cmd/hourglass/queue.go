package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hourglass-sched/hourglass/inspect"
)

func (a *app) queueCmd() *cobra.Command {
	return noun("queue", "List, inspect, pause, resume, limit, add, change and remove queues",
		a.queueLs(), a.queueShow(), a.queueRecent(), a.queuePause(true), a.queuePause(false), a.queueLimit(), a.queueWeight(), a.queueKeycap(), a.queueKeyrate(), a.queueRoute(), a.queueSet(), a.queueRm())
}

// recentResult bounds the bytes of a result the recent table shows; -o
// json prints whole results.
const recentResult = 60

// queueRecent lists a queue's most recently ended tasks.
func (a *app) queueRecent() *cobra.Command {
	limit := 20
	cmd := &cobra.Command{
		Use:   "recent QUEUE",
		Short: "List a queue's most recently ended tasks (succeeded with their results, cancelled), newest first",
		Long: "Lists the records the queue's retention keeps (queues.<q>.retention): tasks succeeded, with what their " +
			"handlers returned, and tasks cancelled. Dead tasks are listed by dlq ls.",
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, ctx, done, err := a.session(cmd)
			if err != nil {
				return err
			}
			defer done()
			ts, err := in.Recent(ctx, args[0], limit)
			if err != nil {
				return err
			}
			return a.emit(struct {
				Tasks []inspect.Task `json:"tasks"`
			}{ts}, func(w io.Writer) {
				row(w, "ENDED", "STATE", "ID", "RESULT")
				for _, t := range ts {
					res := payloadText(t.Result)
					if r := []rune(res); len(r) > recentResult {
						res = string(r[:recentResult]) + "…"
					}
					row(w, when(t.Ended), t.State, t.ID, res)
				}
			})
		},
	}
	cmd.Flags().IntVar(&limit, "limit", limit, fmt.Sprintf("most tasks listed, 1..%d", inspect.MaxRecent))
	return cmd
}

// queueList is the JSON of queue ls and stats.
type queueList struct {
	Queues []inspect.Queue `json:"queues"`
	Total  inspect.Counts  `json:"total"`
}

func (a *app) listQueues(cmd *cobra.Command) (queueList, error) {
	in, ctx, done, err := a.session(cmd)
	if err != nil {
		return queueList{}, err
	}
	defer done()
	qs, total, err := in.Queues(ctx)
	return queueList{Queues: qs, Total: total}, err
}

// emitQueues emits l (queue ls, stats), then warns when the namespace
// holds nothing.
func (a *app) emitQueues(cmd *cobra.Command, l queueList, table func(w io.Writer), err error) error {
	if err := a.emitPartial(l, table, err); err != nil {
		return err
	}
	if in, ierr := a.inspector(); ierr == nil {
		qs := l.Queues
		a.warnEmptyNamespace(cmd.Context(), in, &qs)
	}
	return nil
}

// warnEmptyNamespace warns on stderr when the configured namespace holds
// nothing, no queue registered and no task stored (qs: the queues read
// already, or nil to read them): an empty table then most likely means a
// wrong namespace. It names the config key and, when this Redis user may
// list them (SCAN), the namespaces in use. stdout is left as it is, and
// the exit code too: an empty namespace may be a new deployment.
func (a *app) warnEmptyNamespace(ctx context.Context, in *inspect.Inspector, qs *[]inspect.Queue) {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	if qs == nil {
		read, _, err := in.Queues(ctx)
		if err != nil {
			return // only a hint
		}
		qs = &read
	}
	if len(*qs) > 0 {
		return
	}
	msg := fmt.Sprintf("namespace %q has no queue registered and no task stored", in.Namespace())
	names, complete, err := in.Namespaces(ctx)
	switch {
	case err != nil: // a user limited to its namespace cannot SCAN
	case len(names) == 0 && complete:
		msg += "; no namespace on this Redis has queues registered"
	case len(names) == 0:
		msg += fmt.Sprintf("; no namespace with queues in the first %d keys of each Redis node", inspect.NamespaceScanBudget)
	default:
		msg += "; namespaces with queues on this Redis: " + strings.Join(names, ", ")
		if !complete {
			msg += fmt.Sprintf(" (perhaps others: the search stopped after %d keys of each node)", inspect.NamespaceScanBudget)
		}
	}
	msg += " (the config key namespace: --set namespace=NAME, HOURGLASS_NAMESPACE, or namespace: in the file of -c)"
	fmt.Fprintf(a.errOut, "hourglass: warning: %s\n", printable(msg))
}

func queueTable(w io.Writer, l queueList) {
	row(w, "QUEUE", "STATE", "SCHEDULED", "READY", "IN FLIGHT", "DEAD", "WORKERS")
	for _, q := range l.Queues {
		name := q.Name
		if name == "" {
			name = "(no queue)"
		}
		row(w, name, q.State, q.Counts.Scheduled, q.Counts.Ready, q.Counts.InFlight, q.Counts.Dead, workersText(q))
	}
	row(w, "TOTAL", "", l.Total.Scheduled, l.Total.Ready, l.Total.InFlight, l.Total.Dead)
}

func (a *app) queueLs() *cobra.Command {
	return &cobra.Command{
		Use: "ls", Short: "List queues with their state and counts", Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := a.listQueues(cmd)
			return a.emitQueues(cmd, l, func(w io.Writer) { queueTable(w, l) }, err)
		},
	}
}

func (a *app) queueShow() *cobra.Command {
	return &cobra.Command{
		Use: "show QUEUE", Short: "Show a queue's policy and per-shard counts", Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, ctx, done, err := a.session(cmd)
			if err != nil {
				return err
			}
			defer done()
			q, err := in.Queue(ctx, args[0])
			return a.emitPartial(q, func(w io.Writer) {
				row(w, "queue", q.Name)
				row(w, "state", q.State)
				if !q.PausedAt.IsZero() {
					row(w, "paused since", when(q.PausedAt))
				}
				row(w, "policy", policyText(q.Policy))
				if q.Limits != nil {
					row(w, "limits", q.Limits.String()+" (set at run time)")
				}
				if q.Routing != nil {
					row(w, "routing", "workers "+q.Routing.String()+" (set at run time)")
				}
				row(w, "workers", workersText(q))
				row(w, "retention", retentionText(q.Retention))
				row(w, "turns", turnsText(q.FairWindow, q.KeyConcurrency))
				row(w, "")
				row(w, "SHARD", "SCHEDULED", "READY", "IN FLIGHT", "DEAD")
				for sh, c := range q.Shards {
					row(w, sh, c.Scheduled, c.Ready, c.InFlight, c.Dead)
				}
				row(w, "TOTAL", q.Counts.Scheduled, q.Counts.Ready, q.Counts.InFlight, q.Counts.Dead)
			}, err)
		},
	}
}

// actionResult is the JSON of a single-item action.
type actionResult struct {
	Action string `json:"action"`
	Queue  string `json:"queue,omitempty"`
	ID     string `json:"id,omitempty"`
	// Schedule is the periodic schedule set, removed, paused or resumed.
	Schedule string `json:"schedule,omitempty"`
	State    string `json:"state,omitempty"`
	// Policy is the policy queue set registered.
	Policy *inspect.Policy `json:"policy,omitempty"`
	// Due is a rescheduled task's new due time.
	Due time.Time `json:"due,omitzero"`
	// Limits are the limits queue limit set.
	Limits *inspect.QueueLimits `json:"limits,omitempty"`
	// Key and Weight are what queue weight set.
	Key    string `json:"key,omitempty"`
	Weight *int   `json:"weight,omitempty"`
	// Concurrency is the cap queue keycap set (nil with "default").
	Concurrency *int `json:"concurrency,omitempty"`
	// Rate is the rate queue keyrate set (nil with --default).
	Rate *inspect.KeyRate `json:"rate,omitempty"`
}

func (a *app) done(r actionResult) error {
	return a.emit(r, func(w io.Writer) {
		target := r.Queue
		if r.ID != "" {
			target = r.ID
		}
		if r.Schedule != "" {
			target = r.Schedule
		}
		target = printable(target)
		switch {
		case r.State != "":
			fmt.Fprintf(w, "%s %s (was %s)\n", r.Action, target, r.State)
		case r.Policy != nil:
			fmt.Fprintf(w, "%s %s: %s\n", r.Action, target, policyText(*r.Policy))
		case !r.Due.IsZero():
			fmt.Fprintf(w, "%s %s to %s\n", r.Action, target, when(r.Due))
		default:
			fmt.Fprintf(w, "%s %s\n", r.Action, target)
		}
	})
}

func (a *app) queuePause(pause bool) *cobra.Command {
	use, short, verb := "resume QUEUE", "Resume a paused queue: workers deliver what waited", "resumed"
	if pause {
		use, short, verb = "pause QUEUE", "Pause a queue cluster-wide: workers start none of its tasks", "paused"
	}
	return &cobra.Command{
		Use: use, Short: short, Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, ctx, done, err := a.session(cmd)
			if err != nil {
				return err
			}
			defer done()
			if pause {
				err = in.Pause(ctx, args[0])
			} else {
				err = in.Resume(ctx, args[0])
			}
			if err != nil {
				return err
			}
			return a.done(actionResult{Action: verb, Queue: args[0]})
		},
	}
}

func (a *app) queueSet() *cobra.Command {
	var (
		given   inspect.Policy // the flags' values; only flags given are applied
		retries int            // --max-retries, given.MaxRetries when given
	)
	cmd := &cobra.Command{
		Use:   "set QUEUE",
		Short: "Add a queue, or change its policy, at run time (no scheduler restart)",
		Long: `Add a queue, or change its policy, in every shard at run time: the next
enqueue and retry use it. Flags given change the queue's current policy;
the others keep their current values (for a new queue: the defaults).
A scheduler that starts re-registers the queues of its own config: put
lasting changes in the config too.

--timeout here is the queue's lease timeout, not the command's bound
(which stays at its default of 30s for this verb).`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, ctx, done, err := a.session(cmd)
			if err != nil {
				return err
			}
			defer done()
			p, err := currentPolicy(ctx, in, args[0])
			if err != nil {
				return err
			}
			given.MaxRetries = &retries
			p = applyGiven(cmd, p, given)
			if err := in.SetQueue(ctx, args[0], p); err != nil {
				return err
			}
			return a.done(actionResult{Action: "set", Queue: args[0], Policy: &p})
		},
	}
	d := inspect.DefaultPolicy()
	f := cmd.Flags()
	f.IntVar(&retries, "max-retries", *d.MaxRetries, "retries before a task is dead-lettered (0: never retried)")
	f.DurationVar(&given.Timeout, "timeout", d.Timeout, "lease of one attempt (the queue's, not the command's)")
	f.Int64Var(&given.MaxPayload, "max-payload", d.MaxPayload, "largest payload, bytes")
	f.DurationVar(&given.BackoffBase, "backoff-base", d.BackoffBase, "first retry delay")
	f.DurationVar(&given.BackoffCap, "backoff-cap", d.BackoffCap, "longest retry delay")
	f.Float64Var(&given.BackoffFactor, "backoff-factor", d.BackoffFactor, "growth of the retry delay per attempt")
	return cmd
}

// currentPolicy returns queue name's registered policy, or the defaults
// for a queue no shard knows.
func currentPolicy(ctx context.Context, in *inspect.Inspector, name string) (inspect.Policy, error) {
	q, err := in.Queue(ctx, name)
	switch {
	case errors.Is(err, inspect.ErrNotFound):
		return inspect.DefaultPolicy(), nil
	case err != nil:
		return inspect.Policy{}, err
	case q.Policy == (inspect.Policy{}): // holds tasks, registered nowhere
		return inspect.DefaultPolicy(), nil
	}
	return q.Policy, nil
}

// applyGiven returns p with the fields whose flags cmd was given set
// from given.
func applyGiven(cmd *cobra.Command, p, given inspect.Policy) inspect.Policy {
	f := cmd.Flags()
	if f.Changed("max-retries") {
		p.MaxRetries = given.MaxRetries
	}
	if f.Changed("timeout") {
		p.Timeout = given.Timeout
	}
	if f.Changed("max-payload") {
		p.MaxPayload = given.MaxPayload
	}
	if f.Changed("backoff-base") {
		p.BackoffBase = given.BackoffBase
	}
	if f.Changed("backoff-cap") {
		p.BackoffCap = given.BackoffCap
	}
	if f.Changed("backoff-factor") {
		p.BackoffFactor = given.BackoffFactor
	}
	return p
}

func (a *app) queueRm() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rm QUEUE",
		Short: "Remove a queue: it refuses enqueues while its stored tasks drain",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.confirm(fmt.Sprintf("remove queue %q (new enqueues are refused)", args[0])); err != nil {
				return err
			}
			in, ctx, done, err := a.session(cmd)
			if err != nil {
				return err
			}
			defer done()
			if err := in.RemoveQueue(ctx, args[0]); err != nil {
				return err
			}
			return a.done(actionResult{Action: "removed", Queue: args[0]})
		},
	}
	cmd.Flags().BoolVarP(&a.yes, "yes", "y", false, "do not ask for confirmation")
	return cmd
}

// policyText renders a policy for people.
func policyText(p inspect.Policy) string {
	retries := "default"
	if p.MaxRetries != nil {
		retries = strconv.Itoa(*p.MaxRetries)
	}
	return fmt.Sprintf("max retries %s, timeout %s, max payload %d, backoff %s..%s x%g",
		retries, p.Timeout, p.MaxPayload, p.BackoffBase, p.BackoffCap, p.BackoffFactor)
}

// turnsText says how a queue takes its due tasks: in turns between their
// keys (a fair queue, with its window) or in due order.
func turnsText(window, keyCap int) string {
	switch {
	case window > 0 && keyCap > 0:
		return fmt.Sprintf("fair between keys, window %d a shard, at most %d running per key", window, keyCap)
	case window > 0:
		return fmt.Sprintf("fair between keys, window %d a shard", window)
	}
	return "in due order"
}

// retentionText describes what a queue keeps of its ended tasks.
func retentionText(r *inspect.Retention) string {
	if r == nil {
		return "none: no records of ended tasks (set queues.<q>.retention)"
	}
	return fmt.Sprintf("records of ended tasks kept %s, at most %s per shard", r.Age, thousands(int64(r.Count)))
}

// parseWhen reads an absolute time (RFC 3339) or a duration: ago true
// makes "1h" an hour ago, else an hour from now.
func parseWhen(s string, ago bool) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return time.Time{}, usagef("%q is neither an RFC 3339 time nor a duration", s)
	}
	if ago {
		d = -d
	}
	return time.Now().Add(d), nil
}
