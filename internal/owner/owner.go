// Package owner runs the work of a shard's owner: a list of loops (the
// mover, recovery, periodic firing, resharding), started together for
// each shard a scheduler replica owns, under the shard's fencing epoch,
// and stopped together.
//
// A loop runs until its ctx ends (the shard was lost or the replica is
// shutting down; it returns nil) or it cannot go on: typically a newer
// owner fenced the shard (an error wrapping shard.ErrStaleEpoch). The
// first loop to return ends the others, so that a fenced shard is given up
// whole, and Run returns once all of them have.
//
// Every loop has one shape, [Repeat]'s: a step that does one round of
// work and says how long to wait before the next (a timer, a wake-up
// channel, or both); a failed step is logged once and retried after a
// backoff; a fenced step ends the loop with its error, which is returned,
// not logged: the caller of Run logs it, once.
package owner

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hourglass-sched/hourglass/internal/backoff"
	"github.com/hourglass-sched/hourglass/internal/shard"
)

// Shard is what a loop knows of the shard it runs for.
type Shard struct {
	// ID is the shard number; Epoch the owner's fencing epoch, which every
	// fenced script the loops run presents.
	ID    int
	Epoch int64
	// Wake delivers producers' wake-ups for the shard; nil: none.
	Wake <-chan struct{}
	// Subscribed reports whether Wake's subscription is confirmed, so
	// that every wake-up published from then on is delivered, or
	// followed by a new confirmation (on Wake too) if the connection
	// broke meanwhile; nil: never. The mover sleeps longer while it is.
	Subscribed func() bool
	// Ready is signalled, without blocking, by a loop that made tasks
	// ready (the mover); a loop with work that follows from it (recovery)
	// listens. Run creates it when nil.
	Ready chan struct{}
}

// Loop is one piece of per-shard work.
type Loop struct {
	// Name labels the loop in errors.
	Name string
	// Run works on the shard until ctx ends (then it returns nil) or it
	// cannot go on; typically it returns Repeat's result.
	Run func(ctx context.Context, s Shard) error
}

// Run runs every loop for s until ctx ends or one of them returns; then
// it cancels the others and waits for all of them. It returns the errors
// the loops returned, each wrapped with the loop's name, joined; it logs
// none of them (the loops logged what they retried, the caller logs what
// ended them).
func Run(ctx context.Context, s Shard, loops []Loop) error {
	if s.Ready == nil {
		s.Ready = make(chan struct{}, 1)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(loops))
	var wg sync.WaitGroup
	for i, l := range loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cancel() // the first loop to stop stops the others
			if err := l.Run(ctx, s); err != nil {
				errs[i] = fmt.Errorf("owner: %s of shard %d: %w", l.Name, s.ID, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Forever, as Wait.For, waits for Wait.Wake only.
const Forever time.Duration = math.MaxInt64

// Wait is how a loop waits before its next step.
type Wait struct {
	// For is how long; 0 or less steps again at once.
	For time.Duration
	// Wake, when not nil, ends the wait early when it delivers.
	Wake <-chan struct{}
}

// Steps is a per-shard loop in the shape every owner loop shares; Repeat
// runs it.
type Steps struct {
	// Step does one round of the loop's work and says how to wait before
	// the next. On an error its Wait.Wake still counts; Wait.For is the
	// backoff's.
	Step func(ctx context.Context) (Wait, error)
	// What names a step in the log line of a failed one ("mover call").
	What string
	// Log receives that line: the loop's logger, with its shard and
	// epoch. Default: discard.
	Log hclog.Logger
	// Errors counts the failed steps, Stale those a newer owner fenced;
	// nil counts nothing.
	Errors, Stale prometheus.Counter
	// Backoff is the wait after a failed step; the zero value is
	// internal/backoff's (50 ms doubling to 2 s).
	Backoff backoff.Backoff
}

// Repeat runs st.Step until ctx ends (it returns nil) or a step returns
// an error wrapping shard.ErrStaleEpoch: a newer owner fenced the shard,
// and Repeat returns that error without logging it. Any other error is
// counted, logged once here and retried after the backoff, which a
// successful step resets; Repeat never returns it. Between steps it
// waits as the step said, on one timer for the loop's life: a step costs
// no allocation of Repeat's.
func Repeat(ctx context.Context, st Steps) error {
	if st.Log == nil {
		st.Log = hclog.NewNullLogger()
	}
	timer := time.NewTimer(Forever)
	defer timer.Stop()
	for {
		w, err := st.Step(ctx)
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case err == nil:
			st.Backoff.Reset()
			if w.For <= 0 {
				continue
			}
		case errors.Is(err, shard.ErrStaleEpoch):
			inc(st.Stale)
			return err
		default:
			inc(st.Errors)
			w.For = st.Backoff.Next()
			st.Log.Warn(st.What+" failed; retrying", "error", err, "retry_in", w.For)
		}
		// Since Go 1.23 Reset needs no drain, also after Stop.
		timer.Reset(w.For)
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		case <-w.Wake:
			timer.Stop()
		}
	}
}

func inc(c prometheus.Counter) {
	if c != nil {
		c.Inc()
	}
}
