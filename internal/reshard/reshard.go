// Package reshard moves tasks between shards while the shard count
// changes (docs/resharding.md). It is one of a shard owner's loops
// (internal/owner): while the layout record says a change runs, the owner
// of each shard of the span scans the shard's task ids (and its dead
// letters, for those without data) and moves those whose shard differs
// in the new count, in bounded batches of three
// single-shard steps (shard.Store's Export, Import, Commit), fenced by the
// owner's epoch. A shard with nothing left to move is recorded done; the
// last one ends the change. A shard that the new count drops is deleted
// once empty.
//
// Tasks in flight (ready, popped, leased) and tasks due within
// Config.Margin stay where they are and run there; one that comes back (a
// retry) is moved by a later pass. The loop idles, with no Redis traffic,
// while no change runs: it waits for LayoutChanged.
package reshard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/hourglass-sched/hourglass/internal/backoff"
	"github.com/hourglass-sched/hourglass/internal/owner"
	"github.com/hourglass-sched/hourglass/internal/shard"
)

// cleanPasses is how many passes in a row must find nothing to move
// before a shard is done.
const cleanPasses = 2

// Resharder moves the tasks of each owned shard whose shard changes (Run).
type Resharder struct {
	store *shard.Store
	cfg   Config
	log   hclog.Logger

	mu      sync.Mutex
	changed chan struct{} // closed and replaced by LayoutChanged
	next    time.Time     // when the rate allows the next batch (Rate)
}

// New returns a Resharder on store, whose layout (shard.Store.Layout) says
// whether a change runs; the caller keeps it current and calls
// LayoutChanged after each change.
func New(store *shard.Store, cfg Config) (*Resharder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Resharder{store: store, cfg: cfg, log: cfg.Logger.Named("reshard"), changed: make(chan struct{})}, nil
}

// LayoutChanged wakes every shard's loop to look at the store's layout
// again.
func (m *Resharder) LayoutChanged() {
	m.mu.Lock()
	defer m.mu.Unlock()
	close(m.changed)
	m.changed = make(chan struct{})
}

func (m *Resharder) changes() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

// Run is the owner loop for shard s: it moves tasks while a change runs
// and waits otherwise, until ctx ends (nil) or the shard is fenced by a
// newer owner (an error wrapping shard.ErrStaleEpoch). It has
// owner.Repeat's shape; a failed step is retried after Config.Retry.
func (m *Resharder) Run(ctx context.Context, s owner.Shard) error {
	log := m.log.With("shard", s.ID, "epoch", s.Epoch)
	defer m.cfg.Metrics.stayed(s.ID, nil) // another owner reports the shard now
	doneGen := int64(-1)                  // the generation this shard was recorded done for
	// clean counts the passes in a row that found nothing: a shard is
	// done after cleanPasses of them, so that a scan that skipped part of
	// the hash (its cursor carried over a Redis failover or restart, which
	// rehashes it) cannot end the change alone.
	clean := 0
	// handed is the hand-over last logged: every pass hands the leaving
	// schedules over again (it is idempotent), a log line says so once
	// per change and set of schedules.
	var handed string
	return owner.Repeat(ctx, owner.Steps{
		What: "reshard step", Log: log, Errors: m.cfg.Metrics.errorCounter(),
		Backoff: backoff.Backoff{Min: m.cfg.Retry, Max: m.cfg.Retry},
		Step: func(ctx context.Context) (owner.Wait, error) {
			changed := m.changes()
			l := m.store.Layout()
			idle := owner.Wait{For: owner.Forever, Wake: changed}
			if !l.Resharding() || s.ID >= l.Existing() || doneGen == l.Gen() {
				return idle, nil
			}
			later := owner.Wait{For: m.cfg.Retry, Wake: changed}
			done, err := m.pass(ctx, s, l, log, &handed)
			if !done {
				clean = 0
			}
			switch {
			case errors.Is(err, shard.ErrStaleLayout):
				// A later change began: follow it rather than move tasks
				// by a layout that is over.
				log.Info("the layout changed under the reshard; reading it again", "generation", l.Gen())
				if _, rerr := m.store.RefreshLayout(ctx); rerr == nil {
					m.LayoutChanged()
				}
				return later, nil
			case err != nil:
				return owner.Wait{Wake: changed}, err
			case !done:
				return later, nil // tasks in flight stay: look again later
			case clean+1 < cleanPasses:
				clean++
				return owner.Wait{}, nil
			}
			clean = 0
			ended, err := m.finish(ctx, s, l)
			if err != nil {
				return owner.Wait{Wake: changed}, fmt.Errorf("reshard: record shard %d done: %w", s.ID, err)
			}
			doneGen = l.Gen()
			log.Info("shard done: nothing left to move", "generation", l.Gen())
			if ended {
				log.Info("change of the shard count complete", "generation", l.Gen(), "shards", l.Shards())
				m.LayoutChanged()
			}
			return idle, nil
		},
	})
}

// pass hands the leaving periodic schedules over (logged when they
// differ from *handed), finishes what an earlier owner left in the
// outbox, then scans the shard once and moves what it can. It reports
// done when the scan found nothing to move and nothing that stayed (then
// the shard, if the new count drops it, is empty).
func (m *Resharder) pass(ctx context.Context, s owner.Shard, l shard.Layout, log hclog.Logger, handed *string) (done bool, err error) {
	if m.cfg.Schedules != nil {
		names, err := m.store.HandOverSchedules(ctx, l, s.ID, s.Epoch, m.cfg.Schedules())
		if err != nil {
			return false, err
		}
		if key := fmt.Sprint(l.Gen(), names); len(names) > 0 && key != *handed {
			*handed = key
			log.Info("periodic schedules handed over to their new home shards", "generation", l.Gen(), "schedules", len(names))
		}
	}
	// What an earlier owner left: cancelled entries whose imported
	// copies it did not remove, then a batch it did not commit.
	cancelled, err := m.store.CancelledOnTheWay(ctx, s.ID)
	if err != nil {
		return false, err
	}
	if err := m.unimport(ctx, s, l, cancelled); err != nil {
		return false, err
	}
	left, err := m.store.Outbox(ctx, s.ID)
	if err != nil {
		return false, err
	}
	if len(left) > 0 {
		log.Info("resuming a batch left in the outbox", "tasks", len(left))
		if err := m.deliver(ctx, s, l, left); err != nil {
			return false, err
		}
	}
	moved, stayed := 0, 0
	stayedBy := map[shard.Stay]int{}
	// Two scans: the task ids (every task has data), then the dead
	// letters, for those without data. A dead letter with data that the
	// first scan moved is gone from the second.
	for _, scan := range []func(context.Context, int, uint64, int) ([]string, uint64, error){m.store.ScanIDs, m.store.ScanDead} {
		var cursor uint64
		for {
			ids, next, err := scan(ctx, s.ID, cursor, m.cfg.Batch)
			if err != nil {
				return false, err
			}
			var away []string
			for _, id := range ids {
				if l.ShardOf(id) != s.ID {
					away = append(away, id)
				}
			}
			if len(away) > 0 {
				r, err := m.store.Export(ctx, l, s.ID, s.Epoch, m.cfg.Margin, away)
				if err != nil {
					return false, err
				}
				// The rate counts what moves: tasks that stay (a paused
				// queue's ready ones) cost a scan, not the budget.
				if !m.pace(ctx, len(r.Tasks)) {
					return false, ctx.Err()
				}
				stayed += r.Stayed
				for k, n := range r.StayedBy {
					stayedBy[k] += n
				}
				if err := m.deliver(ctx, s, l, r.Tasks); err != nil {
					return false, err
				}
				moved += len(r.Tasks)
			}
			if cursor = next; cursor == 0 || ctx.Err() != nil {
				break
			}
		}
	}
	m.cfg.Metrics.pass(stayed)
	m.cfg.Metrics.stayed(s.ID, stayedBy)
	if stayed > 0 && m.cfg.ReadyAfter > 0 && ctx.Err() == nil {
		n, err := m.moveWaiting(ctx, s, l, stayedBy, log)
		if err != nil {
			return false, err
		}
		moved += n
	}
	if moved > 0 || stayed > 0 {
		log.Debug("reshard pass", "moved", moved, "stayed", stayed)
		return false, ctx.Err()
	}
	if s.ID >= l.Shards() {
		return m.store.ShardEmpty(ctx, s.ID)
	}
	return true, nil
}

// moveWaiting moves to their new shards the ready tasks of shard s that
// wait for a worker: those of a paused queue, and those due longer than
// Config.ReadyAfter ago (shard.Store.ExportReady), reading each such
// queue's ready list from its head, the task that has waited longest,
// and, for a fair queue, its keys' lists of tasks waiting for their turn
// (shard.Store.WaitingLists: a paused key's, a key's held at its cap,
// a backlog's). It returns how many it moved.
func (m *Resharder) moveWaiting(ctx context.Context, s owner.Shard, l shard.Layout, stayed map[shard.Stay]int, log hclog.Logger) (int, error) {
	var paused map[string]time.Time
	if m.cfg.Paused != nil {
		var err error
		if paused, err = m.cfg.Paused(ctx); err != nil {
			return 0, err
		}
	}
	moved := 0
	for k := range stayed {
		if k.Why != shard.StayReady {
			continue
		}
		_, isPaused := paused[k.Queue]
		lists, err := m.store.WaitingLists(ctx, s.ID, k.Queue)
		if err != nil {
			return moved, err
		}
		for _, list := range append([]string{m.store.Keys().Ready(s.ID, k.Queue)}, lists...) {
			n, err := m.moveList(ctx, s, l, k.Queue, list, isPaused)
			moved += n
			if err != nil {
				return moved, err
			}
		}
	}
	if moved > 0 {
		log.Info("moved ready tasks that waited for a worker to their new shards", "tasks", moved, "ready_after", m.cfg.ReadyAfter)
	}
	return moved, nil
}

// moveList moves the tasks of list (queue's ready list or one of its
// keys' lists) in shard s that wait too long (all of them when the
// queue is paused) to their new shards. It looks at most at ten batches
// of entries a pass and stops at the first entry that has not waited
// that long (the list is in due order, as the mover pushes it).
func (m *Resharder) moveList(ctx context.Context, s owner.Shard, l shard.Layout, queue, list string, paused bool) (int, error) {
	cutoff := time.Now().Add(-m.cfg.ReadyAfter)
	moved := 0
	var start int64
	for range 10 {
		win, err := m.store.ListWindow(ctx, s.ID, list, start, m.cfg.Batch)
		if err != nil {
			return moved, err
		}
		var take []shard.ReadyEntry
		young := false
		for _, e := range win {
			if !paused && (e.Due.IsZero() || e.Due.After(cutoff)) {
				young = true
				break
			}
			if e.ID != "" && l.ShardOf(e.ID) != s.ID {
				take = append(take, e)
			}
		}
		if !m.pace(ctx, len(take)) {
			return moved, ctx.Err()
		}
		out, err := m.store.ExportWaiting(ctx, l, s.ID, s.Epoch, queue, list, take)
		if err != nil {
			return moved, err
		}
		if err := m.deliver(ctx, s, l, out); err != nil {
			return moved, err
		}
		moved += len(out)
		m.cfg.Metrics.movedReady(len(out))
		if young || len(win) < m.cfg.Batch {
			break
		}
		start += int64(len(win) - len(out))
	}
	return moved, nil
}

// pace waits until the rate allows a batch of n tasks, reserving it; it
// returns false if ctx ended first. The shards' loops share the budget.
func (m *Resharder) pace(ctx context.Context, n int) bool {
	if m.cfg.Rate <= 0 {
		return true
	}
	m.mu.Lock()
	now := time.Now()
	start := now
	if m.next.After(now) {
		start = m.next
	}
	m.next = start.Add(time.Duration(n) * time.Second / time.Duration(m.cfg.Rate))
	m.mu.Unlock()
	return !start.After(now) || backoff.Sleep(ctx, start.Sub(now))
}

// deliver imports exported tasks into their new shards, commits them, and
// removes the imported copies of those cancelled on their way.
func (m *Resharder) deliver(ctx context.Context, s owner.Shard, l shard.Layout, tasks []shard.Exported) error {
	if len(tasks) == 0 {
		return nil
	}
	byShard := make(map[int][]shard.Exported)
	ids := make([]string, len(tasks))
	for i, t := range tasks {
		to := l.ShardOf(t.ID)
		byShard[to] = append(byShard[to], t)
		ids[i] = t.ID
	}
	for to, ts := range byShard {
		if _, err := m.store.Import(ctx, l, to, ts); err != nil {
			return err
		}
	}
	cancelled, err := m.store.Commit(ctx, s.ID, s.Epoch, ids)
	if err != nil {
		return err
	}
	var undo []shard.Exported
	if len(cancelled) > 0 {
		gone := make(map[string]bool, len(cancelled))
		for _, id := range cancelled {
			gone[id] = true
		}
		for _, t := range tasks {
			if gone[t.ID] {
				undo = append(undo, t)
			}
		}
		if err := m.unimport(ctx, s, l, undo); err != nil {
			return err
		}
	}
	m.cfg.Metrics.moved(len(tasks) - len(cancelled))
	return m.store.AddMoved(ctx, l, len(tasks)-len(cancelled))
}

// unimport removes the imported copies of tasks cancelled on their way
// out of shard s, then forgets their cancelled entries.
func (m *Resharder) unimport(ctx context.Context, s owner.Shard, l shard.Layout, tasks []shard.Exported) error {
	if len(tasks) == 0 {
		return nil
	}
	by := make(map[int][]shard.Exported)
	ids := make([]string, len(tasks))
	for i, t := range tasks {
		by[l.ShardOf(t.ID)] = append(by[l.ShardOf(t.ID)], t)
		ids[i] = t.ID
	}
	for to, ts := range by {
		if err := m.store.Unimport(ctx, l, to, ts); err != nil {
			return err
		}
	}
	return m.store.Forget(ctx, s.ID, ids)
}

// finish records the shard done, first deleting its keys if the new
// count drops it. It reports whether this ended the change.
func (m *Resharder) finish(ctx context.Context, s owner.Shard, l shard.Layout) (bool, error) {
	if s.ID >= l.Shards() {
		if err := m.store.DropShard(ctx, s.ID); err != nil {
			return false, err
		}
	}
	return m.store.ShardDone(ctx, l, s.ID)
}
