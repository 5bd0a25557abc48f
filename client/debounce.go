package client

import (
	"context"
	"fmt"
	"time"

	"github.com/hourglass-sched/hourglass/internal/shard"
)

// Edge says when a debounced key's task runs (Debounce.Edge).
type Edge int

const (
	// Trailing (the default): the window's task runs once the calls stop
	// for Delay, or MaxWait after the window's first call, with the last
	// call's payload.
	Trailing Edge = iota
	// Leading: the window's first call runs at once; the calls within the
	// window (until Delay after the last one, at most MaxWait after the
	// first) are dropped.
	Leading
	// LeadingAndTrailing: as Leading, and the dropped calls run as one
	// task at the window's end, with the last payload.
	LeadingAndTrailing
)

// Debounce combines the calls of one key of the caller's (a customer, a
// document, a webhook endpoint: not a task id) into fewer tasks
// (Client.Debounce).
type Debounce struct {
	// Key names the calls to combine; its rules are a task id's.
	Key string
	// Delay is the quiet period that ends a window (at least 1ms).
	Delay time.Duration
	// MaxWait bounds a window from its first call (0: no bound): a key
	// called without pause still runs at least that often.
	MaxWait time.Duration
	// Edge says which calls run.
	Edge Edge
}

// Outcome says what a debounced or throttled call did.
type Outcome int

const (
	// Created: the call created a task: the first of a window (or the
	// first kept call of a LeadingAndTrailing window).
	Created Outcome = Outcome(shard.DebounceCreated)
	// Changed: the window's task took the call's payload (and, Trailing,
	// its new due time).
	Changed Outcome = Outcome(shard.DebounceChanged)
	// Dropped: the call fell within a window and runs nothing.
	Dropped Outcome = Outcome(shard.DebounceDropped)
)

// DebounceResult is the outcome of one debounced or throttled call.
type DebounceResult struct {
	Outcome Outcome
	// ID is the task created or changed, or, for a dropped call, the
	// window's task ("" when there is none to name).
	ID string
	// Due is that task's due time, or the window's end for a dropped call.
	Due time.Time
	// Turn is the call's place among its window's calls (1: the first).
	Turn int
}

// Debounce runs t as a call of key d.Key: calls of one key in a window
// become one task (see Edge), decided atomically in Redis whichever
// producers call. t gives the queue, payload, retries, timeout and
// priority (that of the call that creates the window's task: a later
// call changes its payload and time, not its level); its ID (a fresh
// one is made), At, Delay and OnConflict must be left zero.
// Errors: ErrInvalidArgument, ErrUnknownQueue, ErrPayloadTooLarge; a
// call Redis refused before running it is sent again for
// Config.RetryFor, and any other error (a connection lost) leaves its
// outcome unknown (a second call could count twice), so it is returned.
//
// A window lives in the key's shard: while a change of the shard count
// moves the key to another shard, a window may split in two (one more
// run, never a lost one).
func (c *Client) Debounce(ctx context.Context, d Debounce, t Task) (DebounceResult, error) {
	mode := shard.DebounceTrailing
	switch d.Edge {
	case Trailing:
	case Leading:
		mode = shard.DebounceLeading
	case LeadingAndTrailing:
		mode = shard.DebounceLeadingTrailing
	default:
		return DebounceResult{}, fmt.Errorf("%w: debounce edge %d", ErrInvalidArgument, d.Edge)
	}
	return c.debounce(ctx, shard.DebounceArgs{Key: d.Key, Mode: mode, Delay: d.Delay, MaxWait: d.MaxWait}, t)
}

// Throttle runs t as a call of key: the first call of a window runs at
// once, and the calls within window after it are dropped; at most one
// task per key and window. t as for Debounce.
func (c *Client) Throttle(ctx context.Context, key string, window time.Duration, t Task) (DebounceResult, error) {
	return c.debounce(ctx, shard.DebounceArgs{Key: key, Mode: shard.Throttle, Delay: window}, t)
}

func (c *Client) debounce(ctx context.Context, a shard.DebounceArgs, t Task) (DebounceResult, error) {
	if t.ID != "" || t.Key != "" || !t.At.IsZero() || t.Delay != 0 || t.OnConflict != ConflictIgnore {
		return DebounceResult{}, fmt.Errorf("%w: a debounced task takes no ID, Key, At, Delay or OnConflict: its key's window decides them", ErrInvalidArgument)
	}
	checked, err := c.check(t) // the queue, payload size, retries and timeout; no id
	if err != nil {
		return DebounceResult{}, err
	}
	a.Queue, a.Payload, a.MaxRetries, a.Timeout, a.Priority = checked.Queue, checked.Payload, checked.MaxRetries, checked.Timeout, checked.Priority
	c.layout.Layout(ctx)
	var r shard.DebounceResult
	err = c.retryNotRun(ctx, func() error {
		r, err = c.store.Debounce(ctx, a)
		return err
	})
	if err == nil && r.Outcome == shard.DebounceCreated {
		c.hist.Count(t.Queue, shard.HistEnqueued, 1)
	}
	return DebounceResult{Outcome: Outcome(r.Outcome), ID: r.ID, Due: r.Due, Turn: r.Turn}, err
}
