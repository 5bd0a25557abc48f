package worker

import (
	"context"
	"time"
)

// Changing the shard count (docs/resharding.md): the layout record says
// how many shards there are, and while a change runs, tasks are ready in
// the shards of both counts. The worker reads the record at start, on
// every announcement on the control channel and every layoutCheck; its
// fetch loops pop the shards of the layout's span from their next pop on
// (fetch.go's ringFor, flow.go).

// layoutCheck is how often a worker re-reads the layout record besides
// the announcements and its resubscriptions to the control channel (one
// HGETALL): a safety net for an announcement lost without a disconnect.
const layoutCheck = time.Minute

// followLayout re-reads the layout record and logs a change.
func (w *Worker) followLayout(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	before := w.deps.store.Layout()
	l, err := w.deps.store.RefreshLayout(ctx)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			w.deps.log.Warn("could not read the layout record; keeping the current layout", "error", err)
		}
	case l != before:
		w.deps.log.Info("layout changed: popping the shards that exist now",
			"generation", l.Gen(), "shards", l.Shards(), "from", l.From(), "span", l.Span())
	}
}
