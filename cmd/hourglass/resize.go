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

// Following a change of the shard count: resizeProgressEvery is how
// often shards resize reads the layout record while it waits, and
// resizeQuietEvery how often it prints a line when nothing moved.
var (
	resizeProgressEvery = time.Second
	resizeQuietEvery    = 10 * time.Second
)

func (a *app) shardsLayout() *cobra.Command {
	return &cobra.Command{
		Use:   "layout",
		Short: "The layout record: shard count, generation, and the progress of a change",
		Long: `The layout record: the shard count new tasks are placed by, its
generation (the number of changes so far), the state (stable, preparing,
resharding; none when the count was never changed), when the last change
started and finished, the shards it recorded done, the tasks it moved,
and while it reshards each old shard not done yet with the tasks it
holds (at most what it has left to move).`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			in, ctx, done, err := a.session(cmd)
			if err != nil {
				return err
			}
			defer done()
			st, err := in.Layout(ctx)
			return a.emitPartial(st, func(w io.Writer) { layoutTable(w, st) }, err)
		},
	}
}

func (a *app) shardsResize() *cobra.Command {
	var (
		noWait bool
		bound  time.Duration
		place  string
	)
	cmd := &cobra.Command{
		Use:   "resize N [--placement id|key]",
		Short: "Change the shard count to N online, and follow the change",
		Long: `Change the shard count to N online: new tasks are placed by N at once,
and each old shard's owner (a scheduler) moves the tasks whose shard
changed; the last shard done ends the change. Then, unless --no-wait, it
prints the progress on stderr (shards done, tasks moved, tasks/s; every
second while it moves, every 10 s otherwise) until the change ends, and
the total. --timeout bounds that wait (default: none): when it runs out,
or on Ctrl-C, the command stops waiting with exit 1, and the change goes
on. --timeout here is the wait's bound, not each call's (30s).

Before it starts, it warns when queues hold ready tasks nobody takes
(a paused queue, or one whose oldest ready task waited over a minute):
ready tasks stay in their old shard until a worker takes them, which
keeps the change open; the schedulers move those of a paused queue to
their new shard at once and the others after
scheduler.reshard_ready_after (default 1m).

It asks before it starts a change (--yes skips the question; without a
terminal and without --yes it is refused, exit 4), as queue rm and dlq
purge do: a change cannot be called off once started.
While it waits, a line without progress names what each old shard left
waits for (the queue, its ready and in-flight tasks, paused or not).

--placement key switches the deployment to placing each task whose id
starts with a key ("{tenant-42}order-17") by its key, so that all tasks
of a key share a shard, which the per-key limits of a fair queue need
(docs/fairness.md); N may be the current count, and the change moves
the keyed tasks whose shard the rule changes. --placement id switches
back. Without it the rule stays as it is.

Refused (exit 4) while another change runs. Resizing to the current
count (and rule) changes nothing. A change left half-prepared (its starter stopped
before every shard had the new layout) is finished by running the same
resize again.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := strconv.Atoi(args[0])
			if err != nil || n < 1 {
				return usagef("shard count %q: want a positive integer", args[0])
			}
			p := inspect.Placement(place)
			if place != "" && p != inspect.PlaceByID && p != inspect.PlaceByKey {
				return usagef("--placement %q: want id or key", place)
			}
			return a.resize(cmd, n, p, noWait, bound)
		},
	}
	cmd.Flags().StringVar(&place, "placement", "", "place tasks by id or by key (default: as now)")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "start the change and return")
	cmd.Flags().BoolVarP(&a.yes, "yes", "y", false, "do not ask for confirmation")
	cmd.Flags().DurationVar(&bound, "timeout", 0, "stop waiting after this long (the change goes on); 0: wait until it ends")
	return cmd
}

func (a *app) resize(cmd *cobra.Command, n int, place inspect.Placement, noWait bool, bound time.Duration) error {
	in, ctx, done, err := a.session(cmd)
	if err != nil {
		return err
	}
	before, err := in.Layout(ctx)
	if err != nil && !errors.Is(err, inspect.ErrPartial) {
		done()
		return err
	}
	newRule := place != "" && place != before.Placement
	if !before.Changing() && (before.Shards != n || newRule) {
		// Starting a change moves tasks between shards and cannot be
		// called off: ask, as every other operation that cannot be
		// undone does.
		err := a.warnWaiting(ctx, in)
		done()
		if err != nil {
			return err
		}
		what := fmt.Sprintf("change the shard count from %d to %d", before.Shards, n)
		if newRule {
			what = fmt.Sprintf("change the layout from %d shards placed by %s to %d placed by %s", before.Shards, before.Placement, n, place)
		}
		if err := a.confirm(what + " (tasks move between shards; once started, the change runs to its end)"); err != nil {
			return err
		}
		// The question may have waited: the call gets its own bound.
		ctx, done = context.WithTimeout(cmd.Context(), a.timeout)
	}
	var st inspect.LayoutStatus
	if place != "" {
		st, err = in.ChangeLayout(ctx, n, place)
	} else {
		st, err = in.Resize(ctx, n)
	}
	done()
	switch {
	case errors.Is(err, inspect.ErrResizeRunning):
		if st.State == inspect.LayoutPreparing {
			return refusedf("a change to %d shards was left half-prepared (generation %d; whoever started it stopped): run `hourglass shards resize %d --placement %s` to finish it",
				st.Shards, st.Generation, st.Shards, st.Placement)
		}
		return refusedf("another change of the shard count is running (%s): wait until it ends (`hourglass shards` shows its progress), then resize",
			changeLine(st))
	case err != nil:
		return err
	case !st.Changing() && st.Generation == before.Generation && !before.Changing():
		return a.emit(st, func(w io.Writer) {
			fmt.Fprintf(w, "the deployment has %d shards already, placed by %s (generation %d): nothing to change\n", st.Shards, st.Placement, st.Generation)
		})
	}
	started := st
	if !started.Changing() { // it ended already: an empty deployment's change is quick
		started.From, started.FromPlacement = before.Shards, before.Placement
	}
	if noWait {
		return a.emit(st, func(w io.Writer) {
			fmt.Fprintf(w, "started: %s\nnew tasks are placed by %d shards; follow the change with `hourglass shards`\n", changeLine(st), st.Shards)
		})
	}
	fmt.Fprintf(a.errOut, "started: %s\n", changeLine(st))
	end, err := a.follow(cmd.Context(), in, started, bound)
	if err != nil {
		return err
	}
	return a.emit(end, func(w io.Writer) {
		if end.Generation != started.Generation {
			fmt.Fprintf(w, "done: %d -> %d shards (generation %d); generation %d has started since\n",
				started.From, started.Shards, started.Generation, end.Generation)
			return
		}
		took := end.Finished.Sub(end.Started)
		fmt.Fprintf(w, "done: %d -> %d shards (generation %d): %s tasks moved in %s (%s tasks/s)\n",
			started.From, started.Shards, end.Generation, thousands(end.Moved), took.Round(time.Millisecond), rate(end.Moved, took))
	})
}

// stuckAfter is how long the oldest ready task of a queue must have
// waited for shards resize to call the queue unconsumed.
const stuckAfter = time.Minute

// warnWaiting warns before a change when queues hold ready tasks nobody
// takes (paused, or the oldest waited stuckAfter): in the shards whose
// tasks move they keep the change open until they are consumed or, after
// scheduler.reshard_ready_after, moved to their new shard. The question
// that follows (resize) lets the user stop there.
func (a *app) warnWaiting(ctx context.Context, in *inspect.Inspector) error {
	qs, _, err := in.Queues(ctx)
	if err != nil && !errors.Is(err, inspect.ErrPartial) {
		return err
	}
	var stuck []string
	for _, q := range qs {
		switch {
		case q.Counts.Ready == 0:
		case q.State == inspect.QueuePaused:
			stuck = append(stuck, fmt.Sprintf("queue %s: %s ready tasks, paused", q.Name, thousands(q.Counts.Ready)))
		case !q.OldestReady.IsZero() && time.Since(q.OldestReady) > stuckAfter:
			stuck = append(stuck, fmt.Sprintf("queue %s: %s ready tasks, the oldest waiting for %s (no worker takes them?)",
				q.Name, thousands(q.Counts.Ready), time.Since(q.OldestReady).Round(time.Second)))
		}
	}
	if len(stuck) == 0 {
		return nil
	}
	fmt.Fprintf(a.errOut, "hourglass: warning: ready tasks stay in their old shard until a worker takes them, and keep the change open meanwhile:\n")
	for _, line := range stuck {
		fmt.Fprintf(a.errOut, "  %s\n", line)
	}
	fmt.Fprintf(a.errOut, "the schedulers move those of a paused queue to their new shard at once, and the others once they waited scheduler.reshard_ready_after (default 1m; 0: never), ready there: nothing is lost, their order changes\n")
	return nil
}

// waitingLines describes what keeps the old shards of a change open: per
// shard, the queues with tasks in flight.
func waitingLines(st inspect.LayoutStatus) []string {
	var out []string
	for _, p := range st.Pending {
		if p.Problem != "" {
			out = append(out, fmt.Sprintf("shard %d: unreadable: %s", p.Shard, p.Problem))
		}
		for _, w := range p.Waiting {
			out = append(out, fmt.Sprintf("shard %d waits for queue %s: %s", p.Shard, w.Queue, waitingText(w)))
		}
	}
	return out
}

// waitingText is "1,204 ready (paused, oldest waiting 5m0s), 2 in flight".
func waitingText(w inspect.WaitingQueue) string {
	var notes []string
	if w.Paused {
		notes = append(notes, "paused")
	}
	if !w.OldestReady.IsZero() {
		notes = append(notes, "oldest waiting "+time.Since(w.OldestReady).Round(time.Second).String())
	}
	ready := thousands(w.Ready) + " ready"
	if len(notes) > 0 {
		ready += " (" + strings.Join(notes, ", ") + ")"
	}
	return ready + ", " + thousands(w.InFlight) + " in flight"
}

// follow reads the layout record every resizeProgressEvery until the
// change st started ends, printing progress on stderr, and returns the
// record then. bound (0: none) limits the wait.
func (a *app) follow(ctx context.Context, in *inspect.Inspector, st inspect.LayoutStatus, bound time.Duration) (inspect.LayoutStatus, error) {
	wctx := ctx
	if bound > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, bound)
		defer cancel()
	}
	ended := func(cur inspect.LayoutStatus) bool {
		return cur.Generation > st.Generation || (cur.Generation == st.Generation && !cur.Changing())
	}
	if ended(st) {
		return st, nil
	}
	tick := time.NewTicker(resizeProgressEvery)
	defer tick.Stop()
	last, lastAt := st, time.Now()
	first := true // the first reading says what the old shards wait for
	for {
		select {
		case <-wctx.Done():
			why := "interrupted"
			if ctx.Err() == nil {
				why = fmt.Sprintf("--timeout %s reached", bound)
			}
			return last, fmt.Errorf("stopped waiting (%s); the change goes on (%s): follow it with `hourglass shards`", why, changeLine(last))
		case <-tick.C:
		}
		cctx, done := context.WithTimeout(wctx, a.timeout)
		cur, err := in.Layout(cctx)
		done()
		if err != nil && !errors.Is(err, inspect.ErrPartial) {
			if wctx.Err() == nil {
				fmt.Fprintf(a.errOut, "hourglass: warning: %s (trying again)\n", errText(err))
			}
			continue
		}
		if ended(cur) {
			return cur, nil
		}
		now := time.Now()
		if !first && len(cur.Done) == len(last.Done) && cur.Moved == last.Moved && cur.State == last.State && now.Sub(lastAt) < resizeQuietEvery {
			continue
		}
		fmt.Fprintf(a.errOut, "%s (%s tasks/s)\n", changeLine(cur), rate(cur.Moved-last.Moved, now.Sub(lastAt)))
		if first || cur.Moved == last.Moved {
			first = false
			// Nothing moved: say what the shards left wait for.
			for _, line := range waitingLines(cur) {
				fmt.Fprintf(a.errOut, "  %s\n", line)
			}
		}
		last, lastAt = cur, now
	}
}

// layoutLine sums the layout up in one line: generation, shard count and
// state, or the progress of a change.
func layoutLine(st inspect.LayoutStatus) string {
	switch st.State {
	case inspect.LayoutNone:
		return fmt.Sprintf("generation 0, %d shards, stable (never resized)", st.Shards)
	case inspect.LayoutStable:
		return fmt.Sprintf("generation %d, %d shards, stable", st.Generation, st.Shards)
	}
	return fmt.Sprintf("generation %d, %d shards, %s", st.Generation, st.Shards, changeProgress(st))
}

// changeLine describes a running change with its generation.
func changeLine(st inspect.LayoutStatus) string {
	return fmt.Sprintf("generation %d, %s", st.Generation, changeProgress(st))
}

// changeProgress is "resharding 16 -> 32: 12/32 shards done, 45,210
// tasks moved".
func changeProgress(st inspect.LayoutStatus) string {
	from, to := strconv.Itoa(st.From), strconv.Itoa(st.Shards)
	if st.FromPlacement != "" && st.FromPlacement != st.Placement {
		// A change of the placement rule: "16 by id -> 16 by key".
		from, to = from+" by "+string(st.FromPlacement), to+" by "+string(st.Placement)
	}
	if st.State == inspect.LayoutPreparing {
		return fmt.Sprintf("preparing %s -> %s: writing the new layout into every shard", from, to)
	}
	return fmt.Sprintf("%s %s -> %s: %d/%d shards done, %s tasks moved", st.State, from, to, len(st.Done), st.Span, thousands(st.Moved))
}

func layoutTable(w io.Writer, st inspect.LayoutStatus) {
	state := string(st.State)
	if st.State == inspect.LayoutNone {
		state = "stable (never resized)"
	}
	row(w, "generation", st.Generation)
	row(w, "shards", st.Shards)
	row(w, "placement", "by "+string(st.Placement))
	row(w, "state", state)
	if st.Changing() {
		row(w, "change", changeProgress(st))
	}
	if st.Generation > 0 {
		row(w, "started", when(st.Started))
		row(w, "finished", when(st.Finished))
		if st.Changing() {
			row(w, "shards done", fmt.Sprintf("%d of %d", len(st.Done), st.Span))
		}
		row(w, "tasks moved", thousands(st.Moved))
	}
	for _, p := range st.Pending {
		row(w, "pending", fmt.Sprintf("shard %d holds %s tasks", p.Shard, thousands(p.Tasks)))
		if p.Problem != "" {
			row(w, "", "unreadable: "+p.Problem)
		}
		for _, q := range p.Waiting {
			row(w, "", fmt.Sprintf("waits for queue %s: %s", q.Queue, waitingText(q)))
		}
	}
}

// thousands formats n with commas between groups of three digits.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for k, c := range s {
		if k > 0 && (len(s)-k)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// rate formats n per d as a whole number of tasks per second.
func rate(n int64, d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return thousands(int64(float64(n)/d.Seconds() + 0.5))
}
