package client

import (
	"context"
	"time"
)

// Following changes of the shard count (docs/resharding.md): the client
// reads the layout record lazily, and relies on the enqueue script's
// redirect for where tasks go.

// layoutCheck is how often the client re-reads the layout record, at
// most: on the first call, then on a call at least this long after the
// last read.
const layoutCheck = 5 * time.Second

// layoutChanged reads the layout record now and reports whether the
// client's layout changed: an id not found by the old one may be in a
// shard of the new count (cancel and lookup carry no generation, so no
// script redirects them).
func (c *Client) layoutChanged(ctx context.Context) bool {
	before := c.store.Layout()
	l, err := c.store.RefreshLayout(ctx)
	if err != nil {
		return false
	}
	c.layoutRead.Store(time.Now().UnixNano())
	return l != before
}

// followLayout reads the layout record (the shard count; see
// docs/resharding.md) if it was not read in the last layoutCheck. A
// failed read keeps the current layout: the enqueue script redirects a
// call made with an outdated one, so the record matters for the end of a
// change and for lookups, never for where a task is stored.
func (c *Client) followLayout(ctx context.Context) {
	last := c.layoutRead.Load()
	now := time.Now().UnixNano()
	if last != 0 && time.Duration(now-last) < layoutCheck {
		return
	}
	if !c.layoutRead.CompareAndSwap(last, now) {
		return // another call reads it
	}
	if _, err := c.store.RefreshLayout(ctx); err != nil {
		c.layoutRead.Store(last) // try again on the next call
	}
}
