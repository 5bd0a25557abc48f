package worker

import (
	"context"
	"time"
)

// setupCheckEvery is how often a running worker checks again that the
// schedulers registered its queues with its namespace and shard count.
const setupCheckEvery = time.Minute

// checkSetup compares the worker's queues, namespace and shard count with
// what the schedulers registered, at start and then every
// setupCheckEvery until ctx ends: a queue no scheduler registered (or a
// different namespace), or a different shard count, leaves tasks that
// this worker never sees. Each problem is logged when it appears and
// when it clears, and shown by hourglass_worker_queue_registered and
// hourglass_worker_setup_mismatch.
func (w *Worker) checkSetup(ctx context.Context, queues []*queue) {
	names := make([]string, len(queues))
	for i, q := range queues {
		names[i] = q.name
	}
	seen := map[string]string{} // queue -> problem logged
	t := time.NewTicker(setupCheckEvery)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, opTimeout)
		reg, err := w.deps.store.Registration(cctx, names)
		cancel()
		if err == nil {
			l := w.deps.store.Layout()
			mismatch := 0.0
			for _, q := range queues {
				problem := reg.Problem(q.name, l.Namespace(), l.Shards())
				q.met.registered.Set(flag(len(reg.Missing[q.name]) == 0))
				if problem != "" {
					mismatch = 1
				}
				switch {
				case problem != "" && seen[q.name] != problem:
					w.deps.log.Warn("setup differs from the schedulers'", "queue", q.name, "problem", problem)
				case problem == "" && seen[q.name] != "":
					w.deps.log.Info("setup now matches the schedulers'", "queue", q.name)
				}
				seen[q.name] = problem
			}
			w.deps.met.mismatch.Set(mismatch)
		} else if ctx.Err() == nil {
			w.deps.log.Debug("could not check the queues' registration", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// flag is a gauge's value for b.
func flag(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
