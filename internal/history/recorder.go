// Package history keeps each queue's minute history: what the processes
// counted (tasks enqueued, started, succeeded, retried, dead, cancelled,
// and the handler-start lateness histogram) and what the schedulers
// sampled (ready depth, age of the oldest ready task). A process adds to
// a Recorder in memory, at no Redis cost per task; the Recorder writes
// its minutes to Redis a few seconds later in one script call
// (shard.Store.AddQueueHistory), and writes nothing while nothing
// happens. Series reads a queue's minutes back, summed to a step, with
// the lateness quantiles estimated from the histogram.
package history

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/hourglass-sched/hourglass/internal/shard"
)

// Defaults of a Recorder.
const (
	// FlushAfter is how long a count waits in memory before its flush:
	// the first count after a flush arms a timer of this length.
	FlushAfter = 5 * time.Second
	// FlushTimeout bounds one flush.
	FlushTimeout = 5 * time.Second
	// MaxPending bounds the minutes (of one queue each) a Recorder keeps
	// while Redis cannot be written; beyond it the oldest are dropped.
	MaxPending = 10_000
)

// slot is one queue's minute.
type slot struct {
	queue  string
	minute int64 // unix minutes
}

// Recorder aggregates a process's figures per queue and minute and
// flushes them to Redis. Its methods are safe for concurrent use; a nil
// *Recorder records nothing. No goroutine runs while nothing is pending:
// a timer armed by the first count after a flush runs the next one.
// Close flushes what is left and stops the timer.
type Recorder struct {
	store *shard.Store
	log   hclog.Logger
	now   func() time.Time
	after time.Duration

	mu      sync.Mutex
	pending map[slot]*shard.Minute
	timer   *time.Timer    // armed while pending is not empty
	gen     uint64         // counts the timers armed; the current one's
	armed   sync.WaitGroup // one for an armed or running timer
	closed  bool
	off     bool // Redis refused the writes (NOPERM): nothing is counted
	failing bool // the last flush failed (logged once per outage)
	dropped int  // minutes dropped since the last report

	flushing sync.Mutex // one flush at a time
}

// NewRecorder returns a Recorder that writes to store's namespace.
func NewRecorder(store *shard.Store, log hclog.Logger) *Recorder {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Recorder{store: store, log: log, now: time.Now, after: FlushAfter, pending: map[slot]*shard.Minute{}}
}

// minute returns queue's record of the current minute; r.mu is held.
func (r *Recorder) minute(queue string) *shard.Minute {
	k := slot{queue, r.now().Unix() / 60}
	if r.off {
		return new(shard.Minute) // counted nowhere
	}
	m := r.pending[k]
	if m == nil {
		if len(r.pending) >= MaxPending {
			r.dropOldest() // before adding: never the minute being counted
		}
		m = new(shard.Minute)
		r.pending[k] = m
	}
	r.arm()
	return m
}

// arm starts the flush timer unless it is armed or r is closed; r.mu is
// held.
func (r *Recorder) arm() {
	if r.timer == nil && !r.closed {
		r.armed.Add(1)
		r.gen++
		gen := r.gen
		r.timer = time.AfterFunc(r.after, func() { r.flushTimed(gen) })
	}
}

// disarm stops the timer; r.mu is held. A timer that already fired
// finishes its flush (and its share of armed) on its own.
func (r *Recorder) disarm() {
	if r.timer != nil && r.timer.Stop() {
		r.armed.Done()
	}
	r.timer = nil
}

// dropOldest removes the oldest minute; r.mu is held.
func (r *Recorder) dropOldest() {
	var old slot
	first := true
	for k := range r.pending {
		if first || k.minute < old.minute {
			old, first = k, false
		}
	}
	delete(r.pending, old)
	r.dropped++
}

// Count adds n to counter c (shard.HistEnqueued ...) of queue's current
// minute.
func (r *Recorder) Count(queue string, c int, n int) {
	if r == nil || n <= 0 || queue == "" {
		return
	}
	r.mu.Lock()
	r.minute(queue).Counts[c] += uint64(n)
	r.mu.Unlock()
}

// Started counts a handler start late by late (negative: on time).
func (r *Recorder) Started(queue string, late time.Duration) {
	if r == nil {
		return
	}
	r.mu.Lock()
	m := r.minute(queue)
	m.Counts[shard.HistStarted]++
	m.Late[shard.LateBucket(late)]++
	r.mu.Unlock()
}

// Depth adds a sample of queue's ready depth in one shard, and the age of
// its oldest ready task there.
func (r *Recorder) Depth(queue string, ready int64, oldest time.Duration) {
	if r == nil || (ready <= 0 && oldest <= 0) {
		return
	}
	r.mu.Lock()
	m := r.minute(queue)
	m.Depth += uint64(max(ready, 0))
	m.Oldest = max(m.Oldest, uint64(max(oldest, 0)/time.Second))
	r.mu.Unlock()
}

// flushTimed is the flush of timer gen.
func (r *Recorder) flushTimed(gen uint64) {
	defer r.armed.Done()
	r.mu.Lock()
	if r.gen == gen { // not a timer armed since
		r.timer = nil
	}
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), FlushTimeout)
	defer cancel()
	_ = r.Flush(ctx)
}

// Flush writes what is pending now. A failed write keeps its minutes for
// the next flush (so a write whose reply was lost may count twice) and
// is logged once until a flush succeeds again.
func (r *Recorder) Flush(ctx context.Context) error {
	if r == nil {
		return nil
	}
	r.flushing.Lock()
	defer r.flushing.Unlock()
	r.mu.Lock()
	batch := r.pending
	r.pending = map[slot]*shard.Minute{}
	r.disarm()
	dropped := r.dropped
	r.dropped = 0
	r.mu.Unlock()
	if dropped > 0 {
		r.log.Warn("queue history: minutes dropped while Redis could not be written", "minutes", dropped)
	}
	if len(batch) == 0 {
		return nil
	}
	ms := make([]shard.QueueMinute, 0, len(batch))
	for k, m := range batch {
		ms = append(ms, shard.QueueMinute{Queue: k.queue, At: time.Unix(k.minute*60, 0), Minute: *m})
	}
	err := r.store.AddQueueHistory(ctx, ms)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil && strings.Contains(err.Error(), "NOPERM") {
		// An ACL of an older version: trying again would only be refused
		// again.
		r.off = true
		r.pending = map[slot]*shard.Minute{}
		r.disarm()
		r.log.Warn("queue history off: the Redis user may not write it (docs/operations.md, \"Upgrading to queue histories\")", "error", err)
		return err
	}
	if err != nil {
		for k, m := range batch {
			if cur := r.pending[k]; cur != nil {
				depth := cur.Depth + m.Depth // samples of other shards: they add up
				cur.Add(m)
				cur.Depth = depth
			} else {
				r.pending[k] = m
			}
		}
		for len(r.pending) > MaxPending {
			r.dropOldest()
		}
		if !r.failing {
			r.log.Warn("queue history: could not write; will try again", "error", err)
		}
		r.failing = true
		r.arm()
		return err
	}
	if r.failing {
		r.log.Info("queue history: written again")
	}
	r.failing = false
	return nil
}

// Close stops the timer, waits for a flush it runs (bounded by
// FlushTimeout), and flushes what is pending. The Recorder stays usable:
// a count after Close arms the timer again (and a flush that failed in
// Close is tried again then).
func (r *Recorder) Close(ctx context.Context) error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	r.closed = true
	r.disarm()
	r.mu.Unlock()
	r.armed.Wait()
	err := r.Flush(ctx)
	r.mu.Lock()
	r.closed = false // what a failed flush kept waits for the next count's timer
	r.mu.Unlock()
	return err
}
