// Package fire fires periodic schedules (package periodic). It is one of
// the owner's loops (internal/owner): for each shard a scheduler replica
// owns, it fires the schedules whose home is that shard, under the
// shard's fencing epoch.
//
// Each occurrence is fired by fire.lua (shard.Store.Fire), which records
// it as the schedule's last and enqueues its task in one atomic call: an
// occurrence is enqueued at most once, whoever fires it, also after its
// task completed. The loop sleeps until the next occurrence less a lead
// (no polling); the task is due at the occurrence (plus its jitter) and
// is moved by the shard's mover like any delayed task, so it is as
// punctual. With the overlap policy skip there is no lead: whether the
// previous occurrence's task is still stored is decided at the
// occurrence.
//
// The schedules come from the configuration and from the run-time
// registry (inspect.SetSchedule); SetSchedules replaces them, and the
// loops of the shards concerned start over.
//
// When the loop starts (the shard was acquired) it reads each schedule's
// last occurrence and fires those missed since, late, each once, when
// the first of them is at most Config.MisfireGrace old (a hand-over, or
// the owner's death: a new owner takes a dead one's shards within the
// etcd lease's TTL and a second), whatever the catch-up policy; only for
// occurrences missed longer ago does the policy decide (skip, latest,
// all). The loop applies the same rule when it finds itself behind (the
// process was stalled). A failed call (Redis unreachable) is retried
// after a backoff from the state in Redis, so nothing is fired twice.
package fire

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/hourglass-sched/hourglass/internal/confcheck"
	"github.com/hourglass-sched/hourglass/internal/history"
	"github.com/hourglass-sched/hourglass/internal/owner"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/periodic"
)

// Firer fires the schedules of the shards its replica owns.
type Firer struct {
	store *shard.Store
	log   hclog.Logger
	met   *Metrics
	hist  *history.Recorder // Config.History
	now   func() time.Time
	grace time.Duration // Config.MisfireGrace

	mu      sync.Mutex
	all     []*periodic.Compiled
	byShard map[int][]*periodic.Compiled
	running map[int]*shardLoop // of each running shard loop
}

// shardLoop is what SetSchedules tells a running shard loop.
type shardLoop struct {
	gen    uint64        // bumped whenever the shard's schedules change
	reload chan struct{} // signalled then, without blocking
}

// errReload ends a shard's pass when its schedules changed.
var errReload = errors.New("fire: the schedules changed")

// New returns a Firer for the schedules of cfg on store's layout.
func New(store *shard.Store, cfg Config) (*Firer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	met := cfg.Metrics
	if met == nil {
		met = NewMetrics(nil)
	}
	f := &Firer{store: store, log: log.Named("periodic"), met: met, hist: cfg.History, now: time.Now, running: map[int]*shardLoop{},
		grace: confcheck.Or(cfg.MisfireGrace, DefaultMisfireGrace)}
	f.SetSchedules(cfg.Schedules)
	return f, nil
}

// Names returns the names of the schedules fired (SetSchedules).
func (f *Firer) Names() []string {
	f.mu.Lock()
	all := f.all
	f.mu.Unlock()
	names := make([]string, len(all))
	for i, c := range all {
		names[i] = c.Name
	}
	return names
}

// SetSchedules replaces the schedules fired (the configured ones and
// those registered at run time); the loops of the shards whose schedules
// changed start over from the state in Redis, so nothing fires twice.
//
// A schedule's home is its shard in the store's layout: after a change
// of the shard count, call SetSchedules again.
func (f *Firer) SetSchedules(ss []*periodic.Compiled) {
	by := map[int][]*periodic.Compiled{}
	l := f.store.Layout()
	for _, c := range ss {
		h := l.HomeShard(c.Name)
		by[h] = append(by[h], c)
	}
	for _, c := range ss {
		f.met.declare(c.Name)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.all = ss
	for sh, r := range f.running {
		if !same(f.byShard[sh], by[sh]) {
			r.gen++
			select {
			case r.reload <- struct{}{}:
			default:
			}
		}
	}
	f.byShard = by
}

// same reports whether two lists hold the same schedules.
func same(a, b []*periodic.Compiled) bool {
	return slices.EqualFunc(a, b, func(x, y *periodic.Compiled) bool { return reflect.DeepEqual(x.Schedule, y.Schedule) })
}

// mine returns the schedules of shard sh and their generation.
func (f *Firer) mine(sh int) ([]*periodic.Compiled, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.byShard[sh], f.running[sh].gen
}

// changedSince reports whether shard sh's schedules changed since
// generation gen.
func (f *Firer) changedSince(sh int, gen uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.running[sh].gen != gen
}

// Run fires the schedules of shard s until ctx ends (it returns nil) or a
// newer owner fenced the shard (an error wrapping shard.ErrStaleEpoch):
// an owner.Loop, in owner.Repeat's shape. A pass starts from the state in
// Redis (the first step), then each step fires what is due and waits for
// the next occurrence or a change of the schedules, which starts a new
// pass; so does a failed call, after a backoff.
func (f *Firer) Run(ctx context.Context, s owner.Shard) error {
	r := &shardLoop{reload: make(chan struct{}, 1)}
	f.mu.Lock()
	f.running[s.ID] = r
	f.mu.Unlock()
	var p *pass // nil: start (over) from the state in Redis
	defer func() {
		f.mu.Lock()
		delete(f.running, s.ID)
		f.mu.Unlock()
		f.forget(p)
	}()
	return owner.Repeat(ctx, owner.Steps{
		What: "firing", Log: f.log.With("shard", s.ID, "epoch", s.Epoch), Errors: f.met.errors,
		Step: func(ctx context.Context) (owner.Wait, error) {
			if p == nil {
				np, err := f.start(ctx, s)
				if np == nil && err == nil { // no schedule here: wait for some
					return owner.Wait{For: owner.Forever, Wake: r.reload}, nil
				}
				p = np
				return owner.Wait{}, err
			}
			w, err := f.fireDue(ctx, s, p, r.reload)
			if errors.Is(err, errReload) {
				f.forget(p)
			}
			if err != nil {
				p = nil // a new pass reads the state in Redis again
			}
			if errors.Is(err, errReload) {
				return owner.Wait{}, nil
			}
			return w, err
		},
	})
}

// forget drops the gauges of p's schedules (its next and last
// occurrences) that no running shard loop of this replica fires any
// more: the shard was lost, or the schedule moved or was removed. Their
// new owner exports them; a stale copy here would disagree with it.
func (f *Firer) forget(p *pass) {
	if p == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, st := range p.states {
		if !f.firedHere(st.c.Name) {
			f.met.next.DeleteLabelValues(st.c.Name)
			f.met.last.DeleteLabelValues(st.c.Name)
		}
	}
}

// firedHere reports whether a running shard loop fires schedule name.
// f.mu is held.
func (f *Firer) firedHere(name string) bool {
	for sh := range f.running {
		if slices.ContainsFunc(f.byShard[sh], func(c *periodic.Compiled) bool { return c.Name == name }) {
			return true
		}
	}
	return false
}

// state is one schedule's progress on this owner.
type state struct {
	c    *periodic.Compiled
	last time.Time // last occurrence recorded (zero: never)
	next time.Time // next occurrence to fire
}

// fireAt is when st.next is fired.
func (st *state) fireAt() time.Time {
	if st.c.Overlap == periodic.OverlapSkip {
		return st.next
	}
	lead := Lead
	if !st.last.IsZero() {
		lead = min(lead, st.next.Sub(st.last)/2)
	}
	return st.next.Add(-lead)
}

// pass is a shard's firing from one reading of its schedules' state in
// Redis.
type pass struct {
	gen    uint64 // of the schedules it fires
	states []*state
}

// start reads the state of shard s's schedules and catches up: the
// first step of a pass. It returns nil when the shard has no schedule.
func (f *Firer) start(ctx context.Context, s owner.Shard) (*pass, error) {
	mine, gen := f.mine(s.ID)
	if len(mine) == 0 {
		return nil, nil
	}
	names := make([]string, len(mine))
	for i, c := range mine {
		names[i] = c.Name
	}
	recorded, err := f.store.HomeSchedules(ctx, s.ID, names)
	if err != nil {
		return nil, err
	}
	p := &pass{gen: gen, states: make([]*state, len(mine))}
	for i, c := range mine {
		st := &state{c: c, last: recorded[c.Name].Last}
		p.states[i] = st
		f.met.last.WithLabelValues(c.Name).Set(unixSeconds(st.last))
		if err := f.catchUp(ctx, s, st); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// fireDue fires the occurrences of p that are due and says how long to
// wait for the next one, or for reload; errReload when the schedules
// changed since p started.
func (f *Firer) fireDue(ctx context.Context, s owner.Shard, p *pass, reload <-chan struct{}) (owner.Wait, error) {
	if f.changedSince(s.ID, p.gen) {
		return owner.Wait{}, errReload
	}
	// A cron expression that no longer occurs (the library looks five
	// years ahead) is done on this owner.
	p.states = slices.DeleteFunc(p.states, func(st *state) bool { return st.next.IsZero() })
	if len(p.states) == 0 {
		return owner.Wait{For: owner.Forever, Wake: reload}, nil
	}
	states := p.states
	sort.Slice(states, func(i, j int) bool { return states[i].fireAt().Before(states[j].fireAt()) })
	for _, st := range states {
		f.met.next.WithLabelValues(st.c.Name).Set(unixSeconds(st.next))
	}
	if d := states[0].fireAt().Sub(f.now()); d > 0 {
		return owner.Wait{For: d, Wake: reload}, nil
	}
	paused, err := f.store.PausedSchedules(ctx)
	if err != nil {
		return owner.Wait{}, err
	}
	// Stalled is judged by when this step began, not by how late each
	// schedule is once the ones before it were fired: firing many
	// schedules that share an instant takes a round trip each, and that
	// is late, not missed.
	woke := f.now()
	for _, st := range states {
		if st.fireAt().After(f.now()) {
			break
		}
		if woke.Sub(st.next) > f.grace {
			// Stalled (or Redis was down): what was missed is the
			// catch-up policy's.
			if err := f.catchUp(ctx, s, st); err != nil {
				return owner.Wait{}, err
			}
			continue
		}
		_, isPaused := paused[st.c.Name]
		planned := st.fireAt()
		if err := f.fire(ctx, s, st, st.next, isPaused, false); err != nil {
			return owner.Wait{}, err
		}
		f.met.lateness.Observe(f.now().Sub(planned).Seconds())
		st.next = st.c.Next(maxTime(st.next, st.last))
	}
	return owner.Wait{}, nil // look at the next occurrences at once
}

// catchUp fires what st's catch-up policy fires of the occurrences missed
// since st.last, and sets st.next to the first occurrence after now. A
// schedule that never fired starts from now.
func (f *Firer) catchUp(ctx context.Context, s owner.Shard, st *state) error {
	now := f.now()
	paused, err := f.store.PausedSchedules(ctx)
	if err != nil {
		return err
	}
	_, isPaused := paused[st.c.Name]
	if first := st.c.Next(st.last); !st.last.IsZero() && !first.IsZero() && !first.After(now) && now.Sub(first) <= f.grace {
		// Behind by no more than the misfire grace (a hand-over, an
		// owner's death, a short stall): late, not missed, whatever the
		// policy. Without this a daily job whose owner was SIGKILLed
		// just before its time was lost under the policy skip.
		for occ := first; !occ.IsZero() && !occ.After(now); occ = st.c.Next(occ) {
			if err := f.fire(ctx, s, st, occ, isPaused, false); err != nil {
				return err
			}
		}
		st.next = st.c.Next(maxTime(now, st.last))
		return nil
	}
	missed := st.c.Missed(st.last, now)
	if err := f.skipByPolicy(ctx, s, st, now, missed); err != nil {
		return err
	}
	for _, occ := range missed {
		// A paused schedule's missed occurrences are recorded as
		// skipped, not caught up.
		if err := f.fire(ctx, s, st, occ, isPaused, !isPaused); err != nil {
			return err
		}
	}
	st.next = st.c.Next(maxTime(now, st.last))
	return nil
}

// fire fires occurrence occ of st's schedule and records the outcome.
func (f *Firer) fire(ctx context.Context, s owner.Shard, st *state, occ time.Time, paused, caughtUp bool) error {
	l := f.store.Layout()
	c := st.c
	retries := -1 // the queue's default
	if c.MaxRetries != nil {
		retries = *c.MaxRetries
	}
	a := shard.FireArgs{
		Schedule: c.Name, Occurrence: occ, Epoch: s.Epoch, Paused: paused,
		Task: shard.EnqueueArgs{ID: l.OccurrenceID(c.Name, occ), Queue: c.Queue, Payload: c.Payload,
			Due: c.Due(occ), MaxRetries: retries, Timeout: c.Timeout},
	}
	a.Overlap = c.Overlap == periodic.OverlapSkip
	a.CaughtUp = caughtUp
	r, err := f.store.Fire(ctx, s.ID, a)
	if err != nil {
		return fmt.Errorf("fire: %w", err)
	}
	st.last = maxTime(st.last, r.Last)
	f.met.last.WithLabelValues(c.Name).Set(unixSeconds(st.last))
	switch r.Outcome {
	case shard.Fired, shard.FiredDuplicate:
		f.met.fired.WithLabelValues(c.Name).Inc()
		if r.Outcome == shard.Fired {
			f.hist.Count(c.Queue, shard.HistEnqueued, 1)
		}
		if caughtUp {
			f.met.caughtUp.WithLabelValues(c.Name).Inc()
		}
	case shard.SkippedOverlap:
		f.met.skipped.WithLabelValues(c.Name, skipOverlap).Inc()
	case shard.SkippedPaused:
		f.met.skipped.WithLabelValues(c.Name, skipPaused).Inc()
	case shard.Refused:
		f.met.skipped.WithLabelValues(c.Name, skipRefused).Inc()
		f.log.Error("an occurrence's task was refused; the occurrence is skipped", "schedule", c.Name, "occurrence", occ, "error", r.Enqueue.Err)
	case shard.AlreadyFired:
		// Another owner (before a hand-over) recorded it: nothing to do.
	case shard.HandedOver:
		// Its home changed with the shard count; the reload that follows
		// the new layout drops it from this shard.
		f.log.Debug("schedule handed over to its new home shard", "schedule", c.Name, "shard", s.ID)
	}
	return nil
}

// unixSeconds is t as a gauge of unix seconds; 0 for the zero time.
func unixSeconds(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixMilli()) / 1000
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
