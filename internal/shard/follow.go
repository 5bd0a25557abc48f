package shard

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Following the layout record (docs/resharding.md). Every process that
// places or looks for ids by the shard count — producers (package
// client), workers, schedulers and the admin API — follows the record
// through one Follower, with one cadence, FollowConfig.Refresh:
//
//   - it reads the record on first use (Layout, Check);
//   - it reads it again on each announcement on the deployment's control
//     channel, which the components that subscribe to it pass on (Check);
//   - it reads it at most every Refresh otherwise: on use for a component
//     that does not subscribe (Layout: a producer, the admin API), or in
//     Run's loop for one that does (a safety net for an announcement lost
//     without a reconnect);
//   - and the store reads it when an id is not found in its homes
//     (locate.go): it may be in a shard of a count not known yet.
//
// A failed read keeps the current layout. The record decides where ids
// are looked for, never where a task is stored: the enqueue script
// redirects a producer on an outdated layout (ErrLayoutChanged), and the
// fences reject an outdated owner.

// FollowConfig configures a Follower. The zero value is valid.
type FollowConfig struct {
	// Refresh is the most time between two reads of the layout record
	// besides announcements and misses, at least MinLayoutRefresh; 0
	// means DefaultLayoutRefresh.
	Refresh time.Duration
	// FinishStalled makes the follower finish setting up a change left
	// "preparing" for PreparingGrace (its resize stopped): schedulers set
	// it, so that producers on the old count are not kept waiting.
	FinishStalled bool
	// OnChange, if set, is called after the store adopted a new layout,
	// on the goroutine that read it; it must not block.
	OnChange func(before, after Layout)
	// Logger receives the follower's warnings; nil discards them.
	Logger hclog.Logger
}

// Validate reports a Refresh out of range.
func (c FollowConfig) Validate() error {
	if c.Refresh != 0 && c.Refresh < MinLayoutRefresh {
		return fmt.Errorf("%w: layout refresh %s below %s", ErrInvalidArgument, c.Refresh, MinLayoutRefresh)
	}
	return nil
}

// Follower keeps a Store's layout current (see above). Make one per
// Store with Follow. It is safe for concurrent use.
type Follower struct {
	s   *Store
	cfg FollowConfig
	log hclog.Logger
	// read is when the record was last read or a read began (unix ns; 0:
	// never): one lazy read at a time.
	read atomic.Int64
}

// Follow returns the store's follower, configured by cfg, which must be
// valid (zero fields take the defaults). A store has one follower: its
// OnChange is called on every layout the store adopts, however it learnt
// of it (a read, a producer redirected by a shard's marker, a resize).
func (s *Store) Follow(cfg FollowConfig) (*Follower, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Refresh == 0 {
		cfg.Refresh = DefaultLayoutRefresh
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	f := &Follower{s: s, cfg: cfg, log: log}
	s.follower.Store(f)
	return f, nil
}

// Refresh returns the follower's cadence.
func (f *Follower) Refresh() time.Duration { return f.cfg.Refresh }

// Layout returns the store's layout, read again first if it was last read
// Refresh ago or more (or never). A failed read keeps the current one.
func (f *Follower) Layout(ctx context.Context) Layout {
	last := f.read.Load()
	now := time.Now().UnixNano()
	if last != 0 && time.Duration(now-last) < f.cfg.Refresh {
		return f.s.Layout()
	}
	if !f.read.CompareAndSwap(last, now) {
		return f.s.Layout() // another call reads it
	}
	if _, err := f.check(ctx); err != nil {
		f.read.Store(last) // try again on the next call
	}
	return f.s.Layout()
}

// Check reads the layout record now (an announcement was heard, or the
// caller resubscribed to the control channel) and returns the store's
// layout after that.
func (f *Follower) Check(ctx context.Context) (Layout, error) {
	f.read.Store(time.Now().UnixNano())
	return f.check(ctx)
}

func (f *Follower) check(ctx context.Context) (Layout, error) {
	r, err := f.s.ReadLayout(ctx)
	if err != nil {
		return f.s.Layout(), err
	}
	if f.cfg.FinishStalled && r.State == LayoutPreparing && time.Since(r.Started) > PreparingGrace {
		f.log.Warn("a change of the shard count was left half set up; finishing it", "generation", r.Gen, "shards", r.Shards, "from", r.From)
		if _, err := f.s.BeginResize(ctx, r.Shards); err != nil {
			f.log.Warn("could not finish setting up the change of the shard count", "error", err)
		}
	}
	return f.s.Layout(), nil
}

// Run reads the record every Refresh until ctx ends, logging failed
// reads (the layout stays as it is).
func (f *Follower) Run(ctx context.Context) {
	tick := time.NewTicker(f.cfg.Refresh)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if _, err := f.Check(ctx); err != nil && ctx.Err() == nil {
			f.log.Warn("could not read the layout record; keeping the current layout", "error", err)
		}
	}
}
