package worker

import (
	"context"
	"slices"
	"time"

	"github.com/hourglass-sched/hourglass/internal/backoff"
	"github.com/hourglass-sched/hourglass/internal/fanout"
	"github.com/hourglass-sched/hourglass/internal/shard"
)

// Pause and resume (inspect.Pause, hourglass queue pause): the paused
// queues are a hash in Redis (with the limits set at run time, limits.go),
// and each change is announced on the deployment's control channel. A worker reads the hash at start, then
// again on every announcement and every (re)subscription to the channel
// (a reconnect may have lost announcements): no polling. A paused queue
// has no free slot, so the fetch loops stop popping it; a delivery
// popped just before is given back before its handler starts. Tasks
// already running finish. A resume wakes the queue's fetch loops at once.

// checkLayout reads the layout record now (the store's follower logs a
// change; a failed read keeps the current layout).
func (w *Worker) checkLayout(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	if _, err := w.deps.layout.Check(ctx); err != nil && ctx.Err() == nil {
		w.deps.log.Warn("could not read the layout record; keeping the current layout", "error", err)
	}
}

// readControls sets each queue's paused flag and its limits set at run
// time (limits.go) from Redis, in one read, and reports whether it could
// read them.
func (w *Worker) readControls(ctx context.Context, queues []*queue) bool {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	c, err := w.deps.store.Controls(ctx)
	if err != nil {
		if ctx.Err() == nil {
			w.deps.log.Warn("could not read the paused queues; retrying", "error", err)
		}
		return false
	}
	paused := c.Paused
	for _, q := range queues {
		if err := c.BadLimits[q.name]; err != nil {
			w.deps.log.Warn("limits set at run time cannot be used; the worker's own apply (clear or set them again)", "queue", q.name, "error", err)
		}
		l, set := c.Limits[q.name]
		w.applyLimits(q, l, set)
	}
	w.applyRoutes(queues, c)
	for _, q := range queues {
		_, now := paused[q.name]
		if q.paused.Swap(now) == now {
			continue
		}
		q.met.paused.Set(flag(now))
		if now {
			w.deps.log.Info("queue paused: starting none of its tasks until it is resumed", "queue", q.name)
		} else {
			w.deps.log.Info("queue resumed", "queue", q.name)
			q.release(0) // wake the fetch loops waiting for a free slot
		}
	}
	return true
}

// readKeeps reads which queues keep records of their ended tasks
// (queue.keeps), which are fair (queue.fair) and which of those cap
// their keys (queue.keyCapped); it reports whether it could.
func (w *Worker) readKeeps(ctx context.Context, queues []*queue) bool {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	names := make([]string, len(queues))
	for i, q := range queues {
		names[i] = q.name
	}
	kept, err := w.deps.store.Retentions(ctx, names)
	if err != nil {
		if ctx.Err() == nil {
			w.deps.log.Warn("could not read the queues' retention", "error", err)
		}
		return false
	}
	fair, err := w.deps.store.FairWindows(ctx, names)
	if err != nil {
		if ctx.Err() == nil {
			w.deps.log.Warn("could not read which queues are fair", "error", err)
		}
		return false
	}
	capped, err := w.deps.store.KeyCapped(ctx, names)
	if err != nil {
		if ctx.Err() == nil {
			w.deps.log.Warn("could not read which queues cap their keys", "error", err)
		}
		return false
	}
	for _, q := range queues {
		q.keeps.Store(kept[q.name].Age > 0)
		_, isFair := fair[q.name]
		q.fair.Store(isFair)
		q.keyCapped.Store(isFair && capped[q.name])
	}
	return true
}

// watchPauses keeps the queues' paused flags and the layout (the shard
// count) current until ctx ends: the control channel announces changes
// of both. It also hears the cancels of running tasks (run.cancelTask). Each of the subscription's events also asks checkSetup to
// check the registrations again.
func (w *Worker) watchPauses(ctx context.Context, queues []*queue, run *runState) {
	hub := fanout.New(w.rdb, fanout.Classic, w.deps.log)
	defer hub.Close()
	// Cancels of running tasks (cancel.lua publishes the task's id) share
	// the hub's connection.
	cancels := hub.Subscribe(ctx, w.deps.store.Layout().CancelChannel(), func(e fanout.Event) {
		if !e.Subscribed && run.cancelTask(e.Payload) {
			w.deps.log.Info("task cancelled while running; its handler's ctx is cancelled", "task", e.Payload)
		}
	})
	defer cancels.Close()
	changed, stop := hub.Signal(ctx, w.deps.store.Layout().ControlChannel(), nil)
	defer stop()
	var bo backoff.Backoff
	retry := make(<-chan time.Time) // never fires until a read failed
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-retry:
		}
		w.checkLayout(ctx)
		select {
		case w.recheckSetup <- struct{}{}:
		default:
		}
		// Announcements of registered queues come here too (and after a
		// reconnection the subscription's confirmation): the retention
		// may have changed. Not with the periodic setup check, which an
		// idle worker pays for.
		kept := w.readKeeps(ctx, queues)
		if w.readControls(ctx, queues) && kept {
			bo.Reset()
			retry = make(<-chan time.Time)
		} else {
			retry = time.After(bo.Next())
		}
	}
}

// applyRoutes sets each queue's excluded flag from the routings set at
// run time: a queue whose routing does not admit this worker's version
// and tags, or whose routing cannot be read (it may exclude it), gets no
// free slot here, as a paused one (inspect.SetRouting).
func (w *Worker) applyRoutes(queues []*queue, c shard.Controls) {
	for _, q := range queues {
		r, set := c.Routes[q.name]
		bad := c.BadRoutes[q.name]
		w.applyShare(q, r.Share)
		now := bad != nil || set && !r.Admits(w.cfg.Version, w.cfg.Tags)
		if q.excluded.Swap(now) == now {
			continue
		}
		q.met.excluded.Set(flag(now))
		switch {
		case bad != nil:
			w.deps.log.Warn("the queue's routing cannot be read; taking none of its tasks until it is set again", "queue", q.name, "error", bad)
		case now:
			w.deps.log.Info("the queue's routing excludes this worker: taking none of its tasks", "queue", q.name, "routing", r.String(), "version", w.cfg.Version, "tags", w.cfg.Tags)
		default:
			w.deps.log.Info("the queue's routing admits this worker again", "queue", q.name)
			q.release(0) // wake the fetch loops waiting for a free slot
		}
	}
}

// applyShare sets which side of queue q's share (nil: none) this worker
// is on. A change ends the blocking pops in flight, so that the next ones
// cover the shards of the new side (a task popped meanwhile from a shard
// of the other side is given back before its handler starts).
func (w *Worker) applyShare(q *queue, s *shard.Share) {
	var now *queueShare
	if s != nil {
		now = &queueShare{Share: *s, canary: s.Has(w.cfg.Version, w.cfg.Tags)}
	}
	old := q.share.Load()
	if old == nil && now == nil || old != nil && now != nil && sameShare(*old, *now) {
		return
	}
	q.share.Store(now)
	q.showShare()
	w.shareGen.Add(1)
	w.blocking.interrupt()
	select {
	case w.shareChanged <- struct{}{}: // the share clock (shareClock) looks again
	default:
	}
	switch {
	case now == nil:
		w.deps.log.Info("the queue's share is gone: taking its tasks from every shard", "queue", q.name)
	case now.canary:
		w.deps.log.Info("the queue's share puts this worker in its canary set", "queue", q.name, "share", now.String())
	default:
		w.deps.log.Info("the queue's share leaves this worker the tasks its canary set does not take", "queue", q.name, "share", now.String())
	}
	q.release(0) // wake the fetch loops: their next pop covers the new shards
}

// sameShare reports whether a and b route alike.
func sameShare(a, b queueShare) bool {
	return a.Percent == b.Percent && a.canary == b.canary && slices.Equal(a.Tags, b.Tags) && slices.Equal(a.Versions, b.Versions)
}

// shareClock wakes the fetch loops whenever the boundary shard of a
// queue's share changes hands (shard.Share.Takes), until ctx ends: it
// ends the blocking pops in flight, so that the next ones name the
// shards of the new holder, and wakes the loops that wait for a queue
// whose side had no shard. With no such share it only waits for one.
func (w *Worker) shareClock(ctx context.Context, queues []*queue) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		var next time.Time
		n := w.deps.store.Layout().Existing()
		now := w.deps.now()
		for _, q := range queues {
			if s := q.share.Load(); s != nil {
				if at := s.NextChange(n, now); !at.IsZero() && (next.IsZero() || at.Before(next)) {
					next = at
				}
			}
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = next.Sub(now) + time.Millisecond // past the change
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-w.shareChanged:
			t.Stop() // no stale tick after Stop (Go 1.23 timers)
			continue
		case <-t.C:
		}
		if next.IsZero() {
			continue
		}
		w.blocking.interrupt()
		for _, q := range queues {
			if s := q.share.Load(); s != nil {
				q.release(0)
			}
		}
	}
}
