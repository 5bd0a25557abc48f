// Package owner runs the work of a shard's owner: a list of loops (the
// mover, recovery, and later periodic schedules and migrations), started
// together for each shard a scheduler replica owns, under the shard's
// fencing epoch, and stopped together.
//
// A loop runs until its ctx ends (the shard was lost or the replica is
// shutting down; it returns nil) or it cannot go on: typically a newer
// owner fenced the shard (an error wrapping shard.ErrStaleEpoch). The
// first loop to return ends the others, so that a fenced shard is given up
// whole, and Run returns once all of them have.
package owner

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// Shard is what a loop knows of the shard it runs for.
type Shard struct {
	// ID is the shard number; Epoch the owner's fencing epoch, which every
	// fenced script the loops run presents.
	ID    int
	Epoch int64
	// Wake delivers producers' wake-ups for the shard; nil: none.
	Wake <-chan struct{}
	// Ready is signalled, without blocking, by a loop that made tasks
	// ready (the mover); a loop with work that follows from it (recovery)
	// listens. Run creates it when nil.
	Ready chan struct{}
}

// Loop is one piece of per-shard work.
type Loop struct {
	// Name labels the loop in logs and errors.
	Name string
	// Run works on the shard until ctx ends (then it returns nil) or it
	// cannot go on.
	Run func(ctx context.Context, s Shard) error
}

// Run runs every loop for s until ctx ends or one of them returns; then
// it cancels the others and waits for all of them. It returns the errors
// the loops returned, each wrapped with the loop's name, joined.
func Run(ctx context.Context, s Shard, loops []Loop, log hclog.Logger) error {
	if log == nil {
		log = hclog.NewNullLogger()
	}
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
				log.Warn(l.Name+" stopped", "shard", s.ID, "epoch", s.Epoch, "error", err)
				errs[i] = fmt.Errorf("owner: %s of shard %d: %w", l.Name, s.ID, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
