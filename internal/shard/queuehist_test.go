package shard

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestQueueHistory: minutes added by several calls add up (counters and
// histogram), the depth adds and the oldest age keeps the largest; every
// field lands where QueueHistory reads it; a range across midnight reads
// two days' strings; an untouched minute reads zero; a counter saturates
// instead of wrapping; the day's string is created whole, with the TTL;
// a bad operation fails the call before any write.
func TestQueueHistory(t *testing.T) {
	t.Parallel()
	s, rdb := newTestStore(t)
	ctx := testenv.Ctx(t, 10*time.Second)
	midnight := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	last := midnight.Add(-time.Minute) // 23:59 the day before
	var a, b Minute
	for i := range a.Counts {
		a.Counts[i] = uint64(i + 1)
	}
	for i := range a.Late {
		a.Late[i] = uint64(100 + i)
	}
	a.Depth, a.Oldest = 7, 90
	b.Counts[HistStarted], b.Late[LateBuckets-1], b.Depth, b.Oldest = 5, 5, 3, 30
	if err := s.AddQueueHistory(ctx, []QueueMinute{{Queue: "mail", At: last, Minute: a}, {Queue: "mail", At: midnight, Minute: b}}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddQueueHistory(ctx, []QueueMinute{{Queue: "mail", At: last, Minute: b}, {Queue: "other", At: last, Minute: a}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.QueueHistory(ctx, "mail", last.Add(-time.Minute), midnight.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 {
		t.Fatalf("got %d minutes, want 4", len(got))
	}
	want := a
	want.Counts[HistStarted] += 5
	want.Late[LateBuckets-1] += 5
	want.Depth, want.Oldest = 10, 90
	for i, w := range []Minute{{}, want, b, {}} {
		if g := got[i]; g.Minute != w || !g.At.Equal(last.Add(time.Duration(i-1)*time.Minute)) {
			t.Errorf("minute %d: got %v %+v, want %+v", i, g.At, g.Minute, w)
		}
	}
	// Created whole, with the TTL.
	key := s.k.QueueHistory("mail", "20261127")
	if n, _ := rdb.StrLen(ctx, key).Result(); n != DayBytes {
		t.Errorf("day string of %d bytes, want %d", n, DayBytes)
	}
	if at, _ := rdb.PExpireTime(ctx, key).Result(); at != time.Duration(midnight.Add(HistoryKeep).UnixMilli())*time.Millisecond {
		t.Errorf("expires at %s, want %s (its day's end and HistoryKeep)", time.UnixMilli(at.Milliseconds()).UTC(), midnight.Add(HistoryKeep))
	}
	// Saturation.
	var big Minute
	big.Counts[HistEnqueued] = 1<<32 - 10
	for range 2 {
		if err := s.AddQueueHistory(ctx, []QueueMinute{{Queue: "sat", At: midnight, Minute: big}}); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := s.QueueHistory(ctx, "sat", midnight, midnight); got[0].Counts[HistEnqueued] != 1<<32-1 {
		t.Errorf("saturated counter %d, want %d", got[0].Counts[HistEnqueued], uint64(1<<32-1))
	}
	// A bad operation fails the call, nothing written.
	err = queueHistScript.Run(ctx, rdb, []string{s.k.QueueHistory("bad", "20261128"), s.k.QueueHistory("bad2", "20261128")},
		DayBytes, "@1900000000000 +u32:0:1", "@1900000000000 +u32:999999999:1").Err()
	if err == nil || !strings.Contains(err.Error(), "bad operation") {
		t.Fatalf("bad operation: %v", err)
	}
	if n, _ := rdb.Exists(ctx, s.k.QueueHistory("bad", "20261128")).Result(); n != 0 {
		t.Error("a failed call wrote its first key")
	}
}

// TestLateBucketAndLayout: the bucket bounds are increasing and
// LateBucket places a duration in the first bucket whose bound it does
// not exceed; a record's fields fill exactly MinuteBytes, and a day's
// string times the days kept is under 1 MB.
func TestLateBucketAndLayout(t *testing.T) {
	t.Parallel()
	for i := 1; i < len(LateBounds); i++ {
		if LateBounds[i] <= LateBounds[i-1] {
			t.Fatalf("bound %d not above the one before", i)
		}
	}
	for d, want := range map[time.Duration]int{-time.Second: 0, 0: 0, time.Millisecond: 0, 1500 * time.Microsecond: 1, time.Minute: 14, time.Hour: 15} {
		if got := LateBucket(d); got != want {
			t.Errorf("LateBucket(%s) = %d, want %d", d, got, want)
		}
	}
	var m Minute
	for i := range m.Counts {
		m.Counts[i] = 1
	}
	for i := range m.Late {
		m.Late[i] = 1
	}
	m.Depth, m.Oldest = 1, 1
	ops := strings.Fields(m.ops(MinutesPerDay - 1)) // without the expiry
	if len(ops) != HistCounters+LateBuckets+2 {
		t.Fatalf("%d operations, want one per field", len(ops))
	}
	lastOp := ops[len(ops)-1] // ">u24:<off>:1" ends at the day's last bit
	var off int
	if _, err := fmt.Sscanf(lastOp, ">u24:%d:1", &off); err != nil || off+24 != DayBytes*8 {
		t.Errorf("last field %q does not end the day's string (%d bits)", lastOp, DayBytes*8)
	}
	// A day's string lives until HistoryKeep after its day: at any time
	// the strings of today and of the HistoryKeep days before exist.
	now := time.Date(2026, 11, 28, 0, 30, 0, 0, time.UTC)
	alive := 0
	for d := -10; d <= 0; d++ {
		if historyExpiry(now.AddDate(0, 0, d)).After(now) {
			alive++
		}
	}
	if alive != 8 || int64(alive)*DayBytes > 1_000_000 {
		t.Errorf("%d days' strings of %d bytes alive at once, want 8 within 1 MB", alive, DayBytes)
	}
}
