package inspect

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/hourglass-sched/hourglass/internal/shard"
)

// LayoutState is the state of the layout record.
type LayoutState string

// Layout states.
const (
	// LayoutNone: there is no layout record, the shard count was never
	// changed; it is the count the Inspector was made with
	// (Config.Shards), which must be the schedulers'.
	LayoutNone LayoutState = ""
	// LayoutStable: no change runs.
	LayoutStable LayoutState = shard.LayoutStable
	// LayoutPreparing: a change was started and its starter is writing
	// the new layout into every shard; producers still place tasks by the
	// old count. A change left preparing (its starter stopped) is
	// finished by Resize with the same count.
	LayoutPreparing LayoutState = shard.LayoutPreparing
	// LayoutResharding: new tasks are placed by the new count and each old
	// shard's owner moves the tasks whose shard changed.
	LayoutResharding LayoutState = shard.LayoutResharding
)

// LayoutStatus is the deployment's layout record: how many shards there
// are and the progress of a change of that count.
type LayoutStatus struct {
	// Generation counts the changes of the shard count (0: never
	// changed).
	Generation int64 `json:"generation"`
	// Shards is the shard count new tasks are placed by (during a
	// change: the new count).
	Shards int `json:"shards"`
	// From is the count a running change leaves, 0 when none runs.
	From int `json:"from"`
	// Placement is the rule new tasks are placed by: PlaceByID or
	// PlaceByKey.
	Placement Placement `json:"placement"`
	// FromPlacement is the rule a running change leaves ("" when none
	// runs).
	FromPlacement Placement `json:"from_placement,omitempty"`
	// Span is the number of shards that exist: Shards, or the larger of
	// Shards and From while a change runs. Shards 0..Existing-1 are listed
	// and counted.
	Span  int         `json:"span"`
	State LayoutState `json:"state"`
	// Started and Finished are when the last change began and ended
	// (Finished is zero while it runs).
	Started  time.Time `json:"started,omitzero"`
	Finished time.Time `json:"finished,omitzero"`
	// Done lists, in order, the shards of the running change recorded as
	// having nothing left to move; the change ends when all of its span
	// are. Once it ended (and when none ran) it is empty: every shard of
	// that change was done, and those the change dropped no longer
	// exist, so every entry is always below Span.
	Done []int `json:"done"`
	// Moved counts the tasks the last change moved so far.
	Moved int64 `json:"moved"`
	// Pending lists, while a change reshards, the shards being left that
	// are not done yet, with the tasks each holds.
	Pending []PendingShard `json:"pending,omitempty"`
}

// PendingShard is a shard of the count being left that still moves tasks.
type PendingShard struct {
	Shard int `json:"shard"`
	// Tasks is the number of tasks the shard holds, in any state: an
	// upper bound of those it has left to move (the tasks placed there by
	// the new count stay, and so do those in flight until they settle).
	// On a shrink, a shard the new count drops moves them all.
	Tasks int64 `json:"tasks"`
	// Waiting lists the queues with tasks in flight in the shard (ready,
	// popped or leased): they stay in the shard until they settle, so
	// those whose shard changes keep it from being done. A queue's ready
	// tasks that nobody takes (Paused, or an OldestReady long ago) are
	// moved by the shard's owner after scheduler.reshard_ready_after
	// (docs/resharding.md).
	Waiting []WaitingQueue `json:"waiting,omitempty"`
	// Problem says why the shard's counts could not be read (corrupt
	// data); Layout then returns a *PartialError too.
	Problem string `json:"problem,omitempty"`
}

// WaitingQueue is a queue whose tasks in flight keep an old shard open
// during a change of the shard count (PendingShard.Waiting).
type WaitingQueue struct {
	Queue string `json:"queue"`
	// Paused is set when the queue is paused: workers take none of its
	// ready tasks.
	Paused bool `json:"paused,omitempty"`
	// Ready tasks wait in the shard's ready list; InFlight are taken by
	// a worker (popped or leased).
	Ready    int64 `json:"ready"`
	InFlight int64 `json:"in_flight"`
	// OldestReady is the due time of the ready task that has waited
	// longest in the shard (zero: none ready).
	OldestReady time.Time `json:"oldest_ready,omitzero"`
}

// Changing reports whether a change of the shard count runs (preparing
// or resharding).
func (s LayoutStatus) Changing() bool {
	return s.State == LayoutPreparing || s.State == LayoutResharding
}

// Layout reads the layout record: the shard count, its generation and
// the progress of a running change, with (while it reshards) the number
// of tasks each old shard not done yet holds and the queues whose tasks
// in flight keep it open, read with one bounded script call per such
// shard (a shard that cannot be read has a Problem, and the call returns
// a *PartialError with the rest). Without a record it reports the count the
// Inspector was made with, at generation 0, and state LayoutNone.
func (i *Inspector) Layout(ctx context.Context) (LayoutStatus, error) {
	r, err := i.store.ReadLayout(ctx)
	if err != nil {
		return LayoutStatus{}, mapErr(err)
	}
	st := LayoutStatus{Generation: r.Gen, Shards: r.Shards, From: r.From, State: LayoutState(r.State),
		Started: r.Started, Finished: r.Finished, Done: slices.Sorted(slices.Values(r.Done)), Moved: r.Moved,
		Placement: Placement(r.Placement.String()), FromPlacement: Placement(r.FromPlacement.String())}
	if st.Done == nil {
		st.Done = []int{}
	}
	if st.State == LayoutNone {
		st.Shards, st.Placement = r.Layout.Shards(), Placement(r.Layout.Placement().String())
	}
	st.Span = st.Shards
	if st.Changing() {
		st.Span = max(st.Shards, st.From)
	} else {
		// The record keeps the last change's done:<s> fields, up to its
		// span (32 after a shrink 32 -> 8): they describe no shard now.
		st.From, st.Done, st.FromPlacement = 0, []int{}, ""
	}
	if st.State != LayoutResharding {
		return st, nil
	}
	var old []int
	for sh := range st.From {
		if !slices.Contains(st.Done, sh) {
			old = append(old, sh)
		}
	}
	if len(old) == 0 {
		return st, nil
	}
	depths, derr := i.store.Depth(ctx, old)
	if derr = partialOf(derr); derr != nil && !errors.Is(derr, ErrPartial) {
		return st, derr
	}
	paused, err := i.store.Paused(ctx)
	if err != nil {
		return st, err
	}
	bad := problems(derr)
	st.Pending = make([]PendingShard, len(old))
	for k, ds := range depths {
		p := &st.Pending[k]
		p.Shard, p.Problem = old[k], bad[old[k]]
		for _, d := range ds {
			c := countsOf(d)
			p.Tasks += c.Total()
			if c.Ready+c.InFlight > 0 {
				_, isPaused := paused[d.Queue]
				p.Waiting = append(p.Waiting, WaitingQueue{Queue: d.Queue, Paused: isPaused, Ready: c.Ready, InFlight: c.InFlight, OldestReady: d.OldestReady})
			}
		}
		slices.SortFunc(p.Waiting, func(a, b WaitingQueue) int { return cmpString(a.Queue, b.Queue) })
	}
	return st, derr
}

// Resize starts changing the shard count to n (1..4096) and returns the
// layout record once the change reshards: from then on new tasks are
// placed by n, and each old shard's owner (a scheduler) moves the tasks
// whose shard changed; the last shard done ends the change (state
// stable). Follow it with Layout. Queues registered in the old shards are
// registered in the new ones first.
//
// When the deployment has n shards already and no change runs, Resize
// changes nothing and returns the stable record. ErrResizeRunning when
// another change runs, or one to another count was left preparing (then
// the error says which count finishes it); the status returned is then
// the running change's. ErrInvalidArgument for n out of range.
func (i *Inspector) Resize(ctx context.Context, n int) (LayoutStatus, error) {
	return i.changeLayout(ctx, func() (shard.Layout, error) { return i.store.BeginResize(ctx, n) })
}

// Placement is the rule that picks a task's shard: PlaceByID or PlaceByKey
// (docs/resharding.md, "Placement by key").
type Placement string

// The placement rules.
const (
	// PlaceByID places a task by its whole id (crc32 of the id modulo the
	// shard count); every namespace starts with it.
	PlaceByID Placement = "id"
	// PlaceByKey places a task whose id starts with a key ("{key}rest")
	// by its key, so that all tasks of a key share a shard, which the
	// per-key limits of a fair queue need; a task without a key is placed
	// by its id.
	PlaceByKey Placement = "key"
)

// ChangeLayout changes the shard count to n and the placement rule to p
// online, as Resize does for the count alone: a change of the rule with
// the same count moves each task whose shard the new rule changes (for
// PlaceByKey, the keyed tasks whose key's shard is not their id's). It
// returns ErrInvalidArgument for an unknown rule, and what Resize
// returns otherwise.
func (i *Inspector) ChangeLayout(ctx context.Context, n int, p Placement) (LayoutStatus, error) {
	rule, err := shard.ParsePlacement(string(p))
	if err != nil {
		return LayoutStatus{}, mapErr(err)
	}
	return i.changeLayout(ctx, func() (shard.Layout, error) { return i.store.BeginChange(ctx, n, rule) })
}

func (i *Inspector) changeLayout(ctx context.Context, begin func() (shard.Layout, error)) (LayoutStatus, error) {
	if _, err := begin(); err != nil {
		if errors.Is(err, shard.ErrResizeRunning) {
			err = ofKind(ErrResizeRunning, err)
		} else {
			err = mapErr(err)
		}
		st, lerr := i.Layout(ctx)
		if lerr != nil {
			return LayoutStatus{}, err
		}
		return st, err
	}
	return i.Layout(ctx)
}
