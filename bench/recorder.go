package main

import (
	"context"
	"math"
	"slices"
	"sync/atomic"
	"time"
)

// recorder keeps, for each task index of a scenario, how often its
// handler ran and when it first started, and its lateness (handler start
// minus due time, same machine clock).
type recorder struct {
	n       int
	count   []int32
	late    []int64      // ns, first delivery
	start   []int64      // unix ns, first delivery
	handled atomic.Int64 // handler runs, duplicates included
	uniq    atomic.Int64 // tasks handled at least once
}

func newRecorder(n int) *recorder {
	return &recorder{n: n, count: make([]int32, n), late: make([]int64, n), start: make([]int64, n)}
}

// record is called by a handler for task i due at dueNs (unix ns).
func (r *recorder) record(i int, dueNs int64) { r.recordAt(i, dueNs, time.Now().UnixNano()) }

// recordAt records task i due at dueNs, started at now (unix ns): for
// handlers in another process on this machine (BullMQ's).
func (r *recorder) recordAt(i int, dueNs, now int64) {
	if i < 0 || i >= r.n {
		return
	}
	if atomic.AddInt32(&r.count[i], 1) == 1 {
		r.late[i] = now - dueNs
		r.start[i] = now
		r.uniq.Add(1)
	}
	r.handled.Add(1)
}

// wait blocks until want distinct tasks were handled, the deadline, or
// ctx's end; it reports whether all arrived.
func (r *recorder) wait(ctx context.Context, want int, deadline time.Time) bool {
	for r.distinct() < want {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// distinct counts tasks handled at least once.
func (r *recorder) distinct() int { return int(r.uniq.Load()) }

// summary of a set of task indexes.
type summary struct {
	N, Handled, Lost, Dups int
	Early                  int // started before due (asynq's second-precision scores)
	P50, P90, P99, Max     float64
	Min, AbsP99            float64
	FirstStart, LastStart  int64
}

// summarize the first n tasks (or those for which keep is true).
func (r *recorder) summarize(keep func(i int) bool) summary {
	var s summary
	var lat, abs []float64
	s.FirstStart = math.MaxInt64
	for i := 0; i < r.n; i++ {
		if keep != nil && !keep(i) {
			continue
		}
		s.N++
		c := atomic.LoadInt32(&r.count[i])
		if c == 0 {
			s.Lost++
			continue
		}
		s.Handled++
		if c > 1 {
			s.Dups += int(c - 1)
		}
		l := float64(r.late[i]) / 1e6
		if l < 0 {
			s.Early++
		}
		lat = append(lat, l)
		abs = append(abs, math.Abs(l))
		s.FirstStart = min(s.FirstStart, r.start[i])
		s.LastStart = max(s.LastStart, r.start[i])
	}
	if len(lat) == 0 {
		s.FirstStart = 0
		return s
	}
	slices.Sort(lat)
	slices.Sort(abs)
	s.P50, s.P90, s.P99 = quant(lat, 0.5), quant(lat, 0.9), quant(lat, 0.99)
	s.Max, s.Min = lat[len(lat)-1], lat[0]
	s.AbsP99 = quant(abs, 0.99)
	return s
}

// quant returns the q-quantile of sorted xs (nearest rank).
func quant(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[max(0, min(i, len(xs)-1))]
}
