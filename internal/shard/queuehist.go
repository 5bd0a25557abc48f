package shard

import (
	"context"
	"encoding/binary"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/errtext"
)

// A queue's history (docs/operations.md, "Queue history") is kept per UTC
// day in one string of MinutesPerDay records of MinuteBytes, read with
// GETRANGE and written by queuehist.lua. A record's fields, in order:
// the six counters (u32 each), the lateness histogram (LateBuckets u24
// counts), the ready depth (u32, the sum of the shards' samples) and the
// age of the oldest ready task in seconds (u24, the largest sample).
const (
	MinutesPerDay = 1440
	// MinuteBytes is the size of one minute's record.
	MinuteBytes = 4*HistCounters + 3*LateBuckets + 4 + 3
	// DayBytes is the size of a day's string.
	DayBytes = MinutesPerDay * MinuteBytes
	// HistoryKeep is how far back a queue's history reaches: a day's
	// string expires HistoryKeep after its day ends, so the last seven
	// days can always be read and at most eight days' strings exist (a
	// queue's history is at most 8 × DayBytes, about 0.92 MB).
	HistoryKeep = 7 * 24 * time.Hour
)

// The counters of a minute, indexes into Minute.Counts.
const (
	HistEnqueued = iota
	HistStarted
	HistSucceeded
	HistRetried
	HistDead
	HistCancelled
	// HistCounters is the number of counters.
	HistCounters
)

// CounterNames name the counters, in index order, as the JSON API and the
// CLI show them.
var CounterNames = [HistCounters]string{"enqueued", "started", "succeeded", "retried", "dead", "cancelled"}

// LateBuckets is the number of buckets of the handler-start lateness
// histogram: bucket i counts starts late by at most LateBounds[i] (and
// more than the bound before it), the last one those later than every
// bound.
const LateBuckets = 16

// LateBounds are the upper bounds of the lateness buckets but the last.
var LateBounds = [LateBuckets - 1]time.Duration{
	time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond,
	20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond,
	500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second,
	10 * time.Second, 30 * time.Second, time.Minute,
}

// LateBucket returns the bucket of a start late by d (early counts as 0).
func LateBucket(d time.Duration) int {
	for i, b := range LateBounds {
		if d <= b {
			return i
		}
	}
	return LateBuckets - 1
}

// Minute is one minute of a queue's history, or the sum of several.
type Minute struct {
	// Counts are the counters (HistEnqueued ...).
	Counts [HistCounters]uint64
	// Late is the lateness histogram (LateBounds).
	Late [LateBuckets]uint64
	// Depth is the ready depth sampled in the minute (the sum of the
	// shards' samples); Oldest the age of the oldest ready task then, in
	// whole seconds (the largest sample).
	Depth, Oldest uint64
}

// Zero reports whether m holds nothing.
func (m *Minute) Zero() bool { return *m == Minute{} }

// Add adds o's counters and histogram to m, and keeps the larger depth
// and age.
func (m *Minute) Add(o *Minute) {
	for i := range m.Counts {
		m.Counts[i] += o.Counts[i]
	}
	for i := range m.Late {
		m.Late[i] += o.Late[i]
	}
	m.Depth, m.Oldest = max(m.Depth, o.Depth), max(m.Oldest, o.Oldest)
}

// QueueMinute is a minute of one queue.
type QueueMinute struct {
	Queue string
	// At is the minute's start (UTC, whole minutes).
	At time.Time
	Minute
}

// historyField is where a field lies in a day's string.
type historyField struct {
	ty   string
	bits int
}

// ops renders m's fields as queuehist.lua's operations at minute index
// minute of the day; zero fields are left out.
func (m *Minute) ops(minute int) string {
	var b strings.Builder
	off := minute * MinuteBytes * 8
	put := func(op byte, f historyField, v uint64) {
		if v > 0 {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			b.WriteByte(op)
			b.WriteString(f.ty + ":" + strconv.Itoa(off) + ":" + strconv.FormatUint(min64(v, f), 10))
		}
		off += f.bits
	}
	u32, u24 := historyField{"u32", 32}, historyField{"u24", 24}
	for _, v := range m.Counts {
		put('+', u32, v)
	}
	for _, v := range m.Late {
		put('+', u24, v)
	}
	put('+', u32, m.Depth)
	put('>', u24, m.Oldest)
	return b.String()
}

// min64 caps v at the largest value of f's type (the script saturates
// additions there too).
func min64(v uint64, f historyField) uint64 { return min(v, 1<<f.bits-1) }

// parseMinute reads one record.
func parseMinute(rec []byte) Minute {
	var m Minute
	u24 := func(b []byte) uint64 { return uint64(b[0])<<16 | uint64(b[1])<<8 | uint64(b[2]) }
	for i := range m.Counts {
		m.Counts[i] = uint64(binary.BigEndian.Uint32(rec[4*i:]))
	}
	p := 4 * HistCounters
	for i := range m.Late {
		m.Late[i] = u24(rec[p+3*i:])
	}
	p += 3 * LateBuckets
	m.Depth = uint64(binary.BigEndian.Uint32(rec[p:]))
	m.Oldest = u24(rec[p+4:])
	return m
}

// dayOf returns the UTC day of t as its key suffix, and t's minute of it.
func dayOf(t time.Time) (string, int) {
	t = t.UTC()
	return t.Format("20060102"), t.Hour()*60 + t.Minute()
}

// historyExpiry is when the string of t's day expires: HistoryKeep after
// the day ends.
func historyExpiry(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, time.UTC).Add(HistoryKeep)
}

var queueHistScript = newScript("queuehist.lua")

// AddQueueHistory adds minutes to their queues' histories in one script
// call (every history key has the namespace's hash tag). An addition is
// not idempotent: a call whose reply was lost may have counted already.
func (s *Store) AddQueueHistory(ctx context.Context, ms []QueueMinute) error {
	if len(ms) == 0 {
		return nil
	}
	keys := make([]string, 0, len(ms))
	args := make([]any, 0, 1+len(ms))
	args = append(args, DayBytes)
	for _, m := range ms {
		day, minute := dayOf(m.At)
		keys = append(keys, s.k.QueueHistory(m.Queue, day))
		args = append(args, "@"+strconv.FormatInt(historyExpiry(m.At).UnixMilli(), 10)+" "+m.ops(minute))
	}
	if err := queueHistScript.Run(ctx, s.rdb, keys, args...).Err(); err != nil {
		return errtext.Errorf("add to queue history: %w", err)
	}
	return nil
}

// QueueHistory returns queue's minutes from the minute of from up to
// the minute of to (both included, at most HistoryKeep apart), one per
// minute, oldest first; a minute nothing recorded reads as zero. It
// reads each day's part with GETRANGE, in one pipelined round trip.
func (s *Store) QueueHistory(ctx context.Context, queue string, from, to time.Time) ([]QueueMinute, error) {
	from, to = from.UTC().Truncate(time.Minute), to.UTC().Truncate(time.Minute)
	if to.Before(from) {
		return nil, nil
	}
	if to.Sub(from) > HistoryKeep {
		from = to.Add(-HistoryKeep).Truncate(time.Minute)
	}
	type part struct {
		start time.Time
		n     int
		cmd   *redis.StringCmd
	}
	var parts []part
	pipe := s.rdb.Pipeline()
	for at := from; !at.After(to); {
		day, first := dayOf(at)
		n := min(MinutesPerDay-first, int(to.Sub(at)/time.Minute)+1)
		cmd := pipe.GetRange(ctx, s.k.QueueHistory(queue, day), int64(first*MinuteBytes), int64((first+n)*MinuteBytes-1))
		parts = append(parts, part{at, n, cmd})
		at = at.Add(time.Duration(n) * time.Minute)
	}
	_, _ = pipe.Exec(ctx)
	out := make([]QueueMinute, 0, int(to.Sub(from)/time.Minute)+1)
	for _, p := range parts {
		raw, err := p.cmd.Bytes()
		if err != nil && err != redis.Nil {
			return nil, errtext.Errorf("queue history of %q: %w", queue, err)
		}
		for i := range p.n {
			m := QueueMinute{Queue: queue, At: p.start.Add(time.Duration(i) * time.Minute)}
			if rec := raw[min(i*MinuteBytes, len(raw)):]; len(rec) >= MinuteBytes {
				m.Minute = parseMinute(rec[:MinuteBytes])
			}
			out = append(out, m)
		}
	}
	return out, nil
}
