package history

import (
	"context"
	"sync"
	"time"

	"github.com/hourglass-sched/hourglass/internal/shard"
)

// Sampler samples, once a minute, the ready depth of each queue and the
// age of its oldest ready task in the shards a scheduler owns, into a
// Recorder. It samples a shard only if tasks were moved into its ready
// lists since its last sample (Moved) or that sample found ready tasks,
// so an idle shard costs nothing; a sample is one depth.lua call. Two
// owners that both sample a shard in the minute of its handover count
// its depth twice in that minute.
type Sampler struct {
	store *shard.Store
	rec   *Recorder
	now   func() time.Time
	every time.Duration // a minute; a test shortens it

	mu     sync.Mutex
	active map[int]bool // moved since the last sample
	busy   map[int]bool // the last sample found ready tasks
}

// NewSampler returns a Sampler of store's shards into rec.
func NewSampler(store *shard.Store, rec *Recorder) *Sampler {
	return &Sampler{store: store, rec: rec, now: time.Now, every: time.Minute, active: map[int]bool{}, busy: map[int]bool{}}
}

// Moved notes that tasks were moved into shard sh's ready lists.
func (s *Sampler) Moved(sh int) {
	s.mu.Lock()
	s.active[sh] = true
	s.mu.Unlock()
}

// Run samples shard sh once a minute, 30 s into it, while ctx lasts (the
// scheduler runs it as an owner loop of the shard). A failed sample is
// skipped: the next minute samples again.
func (s *Sampler) Run(ctx context.Context, sh int) error {
	t := time.NewTimer(s.untilNext())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		s.sample(ctx, sh)
		t.Reset(s.untilNext())
	}
}

// untilNext is the wait for the next sample.
func (s *Sampler) untilNext() time.Duration {
	now := s.now()
	next := now.Truncate(s.every).Add(s.every / 2) // the middle of the minute
	if !next.After(now) {
		next = next.Add(s.every)
	}
	return next.Sub(now)
}

// sample samples shard sh if it was active.
func (s *Sampler) sample(ctx context.Context, sh int) {
	s.mu.Lock()
	due := s.active[sh] || s.busy[sh]
	delete(s.active, sh)
	s.mu.Unlock()
	if !due {
		return
	}
	ds, err := s.store.Depth(ctx, []int{sh})
	if err != nil || len(ds) == 0 {
		return
	}
	now, busy := s.now(), false
	for _, d := range ds[0] {
		if d.Ready <= 0 {
			continue
		}
		busy = true
		var age time.Duration
		if !d.OldestReady.IsZero() {
			age = now.Sub(d.OldestReady)
		}
		s.rec.Depth(d.Queue, d.Ready, age)
	}
	s.mu.Lock()
	s.busy[sh] = busy
	s.mu.Unlock()
}
