package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/backoff"
	"github.com/hourglass-sched/hourglass/internal/errtext"
	"github.com/hourglass-sched/hourglass/internal/shard"
)

// An enqueue that fails with a transport error has an unknown outcome:
// the script may have run in Redis and only its reply been lost (a
// connection cut, or Redis answering LOADING while it restarts). Sending
// the same task again with the same id is safe: the enqueue script stores
// an id at most once and reports ErrDuplicate for a live one. EnqueueBatch
// does that itself for Config.RetryFor.

// transient reports whether err leaves an enqueue's outcome unknown and
// is worth another attempt: the connection failed, or Redis is loading,
// failing over or busy. Protocol answers (duplicate, unknown queue, ...)
// and the caller's ctx are final.
func transient(err error) bool {
	switch {
	case err == nil, errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, redis.ErrClosed),
		errors.Is(err, ErrDuplicate), errors.Is(err, ErrUnknownQueue),
		errors.Is(err, ErrPayloadTooLarge), errors.Is(err, ErrInvalidArgument):
		return false
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	return notRun(err)
}

// notRun reports whether err says that the call did nothing and may be
// sent again as it is: Redis refused it before it ran (loading, busy,
// a slot or shard count changing, no primary), or it found the id on its
// way to its new shard. Unlike a connection error, which leaves the
// outcome unknown, this is safe to retry for a call that is not
// idempotent (a change, a debounced call).
func notRun(err error) bool {
	if errors.Is(err, shard.ErrTryAgain) {
		return true
	}
	for _, p := range []string{"LOADING", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

// retryNotRun calls f until it returns an error other than one notRun
// accepts, for up to c.retryFor or until ctx ends; it returns f's last
// error.
func (c *Client) retryNotRun(ctx context.Context, f func() error) error {
	var bo backoff.Backoff
	deadline := time.Now().Add(c.retryFor)
	for {
		err := f()
		wait := bo.Next()
		if !notRun(err) || time.Now().Add(wait).After(deadline) || !backoff.Sleep(ctx, wait) {
			return err
		}
	}
}

// enqueueRetrying sends args and sends again, with the same ids, those
// whose outcome is unknown (transient errors), for up to c.retryFor or
// until ctx ends. A duplicate means the task is stored, perhaps by an
// earlier attempt whose reply was lost (the store has go-redis send each
// call once, and sends again itself only a call Redis refused before it
// ran): for an id this client generated (generated[i]),
// which nobody else can have used, that is success. A caller's id keeps
// ErrDuplicate, with a note when a retry reported it, since the id may
// also have been live before this call.
func (c *Client) enqueueRetrying(ctx context.Context, args []shard.EnqueueArgs, generated []bool) []shard.EnqueueResult {
	out := c.enqueueOnce(ctx, args)
	for i := range out {
		if generated[i] {
			out[i].Err = storedIsSuccess(out[i].Err)
		}
	}
	var bo backoff.Backoff
	deadline := time.Now().Add(c.retryFor)
	for {
		var again []int
		for i, r := range out {
			if transient(r.Err) {
				again = append(again, i)
			}
		}
		wait := bo.Next()
		if len(again) == 0 || time.Now().Add(wait).After(deadline) || !backoff.Sleep(ctx, wait) {
			return out
		}
		sub := make([]shard.EnqueueArgs, len(again))
		for j, i := range again {
			sub[j] = args[i]
		}
		for j, r := range c.store.EnqueueBatch(ctx, sub) {
			i := again[j]
			if errors.Is(r.Err, ErrDuplicate) {
				if generated[i] {
					r.Err = storedIsSuccess(r.Err)
				} else {
					r.Err = fmt.Errorf("%w (reported by a retry after %v: this call may have stored it)", r.Err, out[i].Err)
				}
			}
			out[i] = r
		}
	}
}

// storedIsSuccess maps the duplicate of an id this client generated
// (stored by an earlier attempt) to success, or, when replicas did not
// confirm it, to ErrNotReplicated alone; other errors are unchanged.
func storedIsSuccess(err error) error {
	switch {
	case !errors.Is(err, ErrDuplicate):
		return err
	case errors.Is(err, ErrNotReplicated):
		return ErrNotReplicated
	}
	return nil
}

// combineMax is the largest call (in tasks) that shares round trips with
// the calls around it. A larger batch goes alone: its tasks share Redis's
// per-call cost already, and waiting for the batch in flight would only
// delay it.
const combineMax = 64

// enqueueOnce sends args once. A call of up to combineMax tasks (every
// Enqueue, and small batches such as a producer's tick) goes through the
// client's combiner: alone when no other such call is in flight, else in
// one EnqueueBatch with the calls that waited for it, which is exactly
// what that batch would report for each of them (a duplicate id in the
// same batch is a duplicate, as it is in two calls). Under load, calls
// from many goroutines so share round trips and Redis's per-call cost:
// each shard's script call carries the tasks of several calls.
func (c *Client) enqueueOnce(ctx context.Context, args []shard.EnqueueArgs) []shard.EnqueueResult {
	if len(args) > combineMax {
		return c.store.EnqueueBatch(ctx, args)
	}
	out, ok := c.small.Do(ctx, args)
	if !ok {
		out = make([]shard.EnqueueResult, len(args))
		for i, a := range args {
			out[i].Err = errtext.Errorf("enqueue %s: not sent: %w", a.ID, context.Cause(ctx))
		}
	}
	return out
}

// enqueueMerged returns the combiner's send: the calls' tasks as one
// EnqueueBatch, each call given its own tasks' results.
func enqueueMerged(store *shard.Store) func(context.Context, [][]shard.EnqueueArgs) [][]shard.EnqueueResult {
	return func(ctx context.Context, calls [][]shard.EnqueueArgs) [][]shard.EnqueueResult {
		if len(calls) == 1 {
			return [][]shard.EnqueueResult{store.EnqueueBatch(ctx, calls[0])}
		}
		var all []shard.EnqueueArgs
		for _, args := range calls {
			all = append(all, args...)
		}
		res := store.EnqueueBatch(ctx, all)
		out := make([][]shard.EnqueueResult, len(calls))
		for i, args := range calls {
			out[i], res = res[:len(args):len(args)], res[len(args):]
		}
		return out
	}
}
