// Package backoff is the retry delay every Hourglass loop uses after a
// failed call to Redis or etcd: it starts at a minimum and doubles up to a
// maximum, and a success resets it.
package backoff

import (
	"context"
	"time"
)

// Backoff is an exponential delay. The zero value starts at 50 ms and
// stops growing at 2 s.
type Backoff struct {
	// Min is the first delay (default 50 ms); Max the largest (default 2 s).
	Min, Max time.Duration
	cur      time.Duration
}

// Next returns the delay to wait now and doubles the following one.
func (b *Backoff) Next() time.Duration {
	lo, hi := b.Min, b.Max
	if lo <= 0 {
		lo = 50 * time.Millisecond
	}
	if hi <= 0 {
		hi = 2 * time.Second
	}
	b.cur = min(max(b.cur, lo), hi)
	d := b.cur
	b.cur = min(2*b.cur, hi)
	return d
}

// Reset starts the next failure over at Min.
func (b *Backoff) Reset() { b.cur = 0 }

// Wait sleeps Next() or until ctx ends.
func (b *Backoff) Wait(ctx context.Context) { Sleep(ctx, b.Next()) }

// Sleep waits d and reports true, or false if ctx ended first.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
