package worker

import (
	"context"
	"sync"
)

// runState tracks one Run's deliveries.
type runState struct {
	hctx     context.Context // handlers' parent: ends after the shutdown grace
	handlers sync.WaitGroup
	claims   sync.WaitGroup // claims in flight

	mu      sync.Mutex
	active  map[*delivery]struct{}
	closing bool // no handler starts any more
	// onBusy hears the number of handlers running after each start and
	// end (the process registry's busy slots); nil: nobody.
	onBusy func(int)
}

// start runs the delivery's handler in a goroutine of its own; if the
// worker is shutting down (ctx ended) it gives the task back instead.
func (r *runState) start(ctx context.Context, d *delivery) {
	d.stopping = ctx.Done()
	r.mu.Lock()
	if ctx.Err() != nil || r.closing {
		r.mu.Unlock()
		// Popped while shutting down: give it back at once.
		_ = d.finish(context.Background(), ErrShuttingDown)
		return
	}
	// The handler's ctx is made here, before the delivery is active, so
	// that cancelTask (another goroutine) may end it.
	hctx, cancel := context.WithCancelCause(r.hctx)
	d.cancel = cancel
	r.active[d] = struct{}{}
	r.handlers.Add(1) // under mu: never after close, so never during handlers.Wait from zero
	r.busy()
	r.mu.Unlock()
	go func() {
		defer r.handlers.Done()
		d.run(hctx)
		r.mu.Lock()
		delete(r.active, d)
		r.busy()
		r.mu.Unlock()
	}()
}

// busy reports the handlers running to onBusy; r.mu is held.
func (r *runState) busy() {
	if r.onBusy != nil {
		r.onBusy(len(r.active))
	}
}

// cancelTask ends the handler's ctx of the delivery of task id, with the
// cause ErrCancelled, if this worker runs (or holds) it: the task was
// cancelled (client.Cancel), and nothing its handler reports is
// recorded. It reports whether it did.
func (r *runState) cancelTask(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	found := false
	for d := range r.active {
		if d.sd.Task.ID == id {
			d.cancelled.Store(true)
			d.cancel(ErrCancelled)
			found = true
		}
	}
	return found
}

// close stops handlers from starting and returns how many run.
func (r *runState) close() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closing = true
	return len(r.active)
}

func (r *runState) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.active)
}

// abandon stops the lease watchdog of every delivery still open and
// returns how many there were.
func (r *runState) abandon() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	for d := range r.active {
		d.stopWatchdog()
	}
	return len(r.active)
}

// releaseOpen releases manual-ack deliveries whose handler has returned
// but which were never acked or nacked.
func (r *runState) releaseOpen() {
	r.mu.Lock()
	open := make([]*delivery, 0, len(r.active))
	for d := range r.active {
		open = append(open, d)
	}
	r.mu.Unlock()
	for _, d := range open {
		if d.handlerDone.Load() {
			_ = d.finish(context.Background(), ErrShuttingDown)
		}
	}
}
