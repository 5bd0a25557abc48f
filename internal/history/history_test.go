package history

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// calls returns how many queuehist.lua calls Redis ran (INFO
// commandstats counts a script's BITFIELD calls).
func bitfields(t *testing.T, e *shardtest.Env) string {
	t.Helper()
	info, err := e.RDB.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(info, "\n") {
		if strings.HasPrefix(l, "cmdstat_bitfield:") {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// TestRecorderFlushesOnItsOwn: counts reach Redis after the timer
// (without Close), in one call for several queues; an idle Recorder
// writes nothing and runs no timer; a failed write keeps its counts for
// the next flush; Close flushes what is left.
func TestRecorderFlushesOnItsOwn(t *testing.T) {
	t.Parallel()
	e := shardtest.New(t, shardtest.Options{Namespace: "hist", Shards: 2})
	ctx := testenv.Ctx(t, 20*time.Second)
	r := NewRecorder(e.Store, nil)
	r.after = 50 * time.Millisecond
	now := time.Now()
	for range 3 {
		r.Count("a", shard.HistEnqueued, 2)
	}
	r.Count("b", shard.HistDead, 1)
	r.Started("a", 3*time.Millisecond)
	r.Count("", shard.HistEnqueued, 1) // no queue: ignored
	total := func(q string) shard.Minute {
		ms, err := e.Store.QueueHistory(ctx, q, now.Add(-time.Minute), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		var sum shard.Minute
		for _, m := range ms {
			sum.Add(&m.Minute)
		}
		return sum
	}
	testenv.WaitFor(t, 10*time.Second, "the timer's flush", func() (bool, string) {
		a := total("a")
		return a.Counts[shard.HistEnqueued] == 6 && a.Counts[shard.HistStarted] == 1 && a.Late[2] == 1, fmt.Sprintf("%+v", a)
	})
	if b := total("b"); b.Counts[shard.HistDead] != 1 {
		t.Fatalf("queue b: %+v", b)
	}
	if stats := bitfields(t, e); !strings.Contains(stats, "calls=2,") {
		t.Fatalf("two queues' minutes took %q, want one script call with a BITFIELD per key", stats)
	}
	r.mu.Lock()
	armed := r.timer != nil
	r.mu.Unlock()
	if armed {
		t.Fatal("an idle recorder keeps a timer")
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if stats := bitfields(t, e); !strings.Contains(stats, "calls=2,") {
		t.Fatalf("an empty flush wrote: %q", stats)
	}

	// A failed write keeps the counts.
	r.after = time.Hour
	r.Count("a", shard.HistSucceeded, 4)
	e.Redis.Stop(5 * time.Second)
	if err := r.Flush(ctx); err == nil {
		t.Fatal("flush to a stopped Redis succeeded")
	}
	e.Redis.Restart()
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if a := total("a"); a.Counts[shard.HistSucceeded] != 4 {
		t.Fatalf("counts of a failed flush lost: %+v", a)
	}
}

// TestStepsAndQuantile: minutes sum to aligned steps (depth and age the
// largest); quantiles interpolate inside their bucket, the last bucket
// answers its lower bound, an empty histogram answers none.
func TestStepsAndQuantile(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	var ms []shard.QueueMinute
	for i := range 10 {
		m := shard.QueueMinute{Queue: "q", At: base.Add(time.Duration(i) * time.Minute)}
		m.Counts[shard.HistStarted] = 1
		m.Depth, m.Oldest = uint64(i), uint64(10-i)
		ms = append(ms, m)
	}
	steps := Steps(ms, 5*time.Minute)
	if len(steps) != 2 || steps[0].Counts[shard.HistStarted] != 5 || steps[0].Depth != 4 || steps[0].Oldest != 10 || !steps[1].At.Equal(base.Add(5*time.Minute)) {
		t.Fatalf("steps %+v", steps)
	}
	// A step that does not divide a day is aligned to the epoch: 7 min.
	odd := Steps(ms, 7*time.Minute)
	for _, st := range odd {
		if st.At.Unix()%(7*60) != 0 {
			t.Fatalf("a 7-minute step starts at %v, not a multiple of 7 min since the epoch", st.At)
		}
	}
	var m shard.Minute
	if _, ok := Quantile(&m, 0.5); ok {
		t.Fatal("empty histogram has a quantile")
	}
	m.Late[shard.LateBucket(15*time.Millisecond)] = 100 // (10ms, 20ms]
	if d, _ := Quantile(&m, 0.5); d != 15*time.Millisecond {
		t.Errorf("p50 %s, want 15ms (the bucket's middle)", d)
	}
	m.Late[shard.LateBuckets-1] = 100 // later than a minute
	if d, _ := Quantile(&m, 0.99); d != time.Minute {
		t.Errorf("p99 %s, want 1m (the last bucket's lower bound)", d)
	}
	if d, _ := Quantile(&m, 0.25); d != 15*time.Millisecond {
		t.Errorf("p25 %s, want 15ms", d)
	}
}

// TestSamplerSamplesActiveShards: a shard is sampled after a move into
// its ready lists and while its last sample found ready tasks; an idle
// shard is not read at all.
func TestSamplerSamplesActiveShards(t *testing.T) {
	t.Parallel()
	e := shardtest.New(t, shardtest.Options{Namespace: "samp", Shards: 2, Queues: map[string]shard.QueuePolicy{"default": shardtest.Policy()}})
	ctx := testenv.Ctx(t, 20*time.Second)
	r := NewRecorder(e.Store, nil)
	r.after = time.Hour // no flush: the test reads what is pending
	s := NewSampler(e.Store, r)
	ids := e.IDsIn(0, 3, "r")
	e.Ready("default", ids...)
	s.sample(ctx, 0) // not active: not read
	s.sample(ctx, 1)
	if r.pending[slot{"default", time.Now().Unix() / 60}] != nil {
		t.Fatal("an inactive shard was sampled")
	}
	s.Moved(0)
	s.sample(ctx, 0)
	s.sample(ctx, 0) // busy: sampled again (its depth adds up in the minute)
	var got *shard.Minute
	for k, m := range r.pending {
		if k.queue == "default" {
			got = m
		}
	}
	if got == nil || got.Depth != 6 {
		t.Fatalf("sampled %+v, want the depth 3 twice", got)
	}
	r.pending = map[slot]*shard.Minute{}
	e.Popped("default", "r", 3) // empty again
	s.sample(ctx, 0)            // finds none ready: no longer busy
	s.sample(ctx, 0)
	if len(r.pending) != 0 {
		t.Fatalf("an empty shard was recorded: %v", r.pending)
	}
	s.mu.Lock()
	busy := s.busy[0]
	s.mu.Unlock()
	if busy {
		t.Fatal("a shard without ready tasks stays busy")
	}
	// Run samples on its own (a test-short minute) until ctx ends.
	s.every = 200 * time.Millisecond
	e.Ready("default", e.IDsIn(1, 2, "s")...)
	s.Moved(1)
	rctx, cancel := context.WithCancel(ctx)
	ran := make(chan error)
	started := time.Now()
	go func() { ran <- s.Run(rctx, 1) }()
	depth := func() uint64 {
		r.mu.Lock()
		defer r.mu.Unlock()
		var sum uint64
		for _, m := range r.pending {
			sum += m.Depth
		}
		return sum
	}
	ds, err := e.Store.Depth(ctx, []int{1})
	if err != nil || len(ds[0]) != 1 || ds[0][0].Ready == 0 {
		t.Fatalf("shard 1's depth: %+v %v", ds, err)
	}
	each := uint64(ds[0][0].Ready) // what one sample adds
	testenv.WaitFor(t, 5*time.Second, "two samples by Run", func() (bool, string) {
		return depth() >= 2*each, fmt.Sprint(depth())
	})
	cancel()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	// Once a period: each sample adds the shard's ready tasks.
	if samples, most := depth()/each, uint64(time.Since(started)/s.every)+1; samples > most {
		t.Fatalf("%d samples in %s, more than one a period (%d)", samples, time.Since(started), most)
	}
	_ = r.Close(ctx)
}

// TestRecorderStopsOnNOPERM: a Redis user whose ACL predates the history
// (no access to its keys) turns the Recorder off after one refused
// write: it keeps nothing and arms no timer, instead of trying every few
// seconds.
func TestRecorderStopsOnNOPERM(t *testing.T) {
	t.Parallel()
	e := shardtest.New(t, shardtest.Options{Namespace: "perm", Shards: 2})
	ctx := testenv.Ctx(t, 10*time.Second)
	if err := e.RDB.Do(ctx, "ACL", "SETUSER", "old", "on", ">pw", "~{perm:*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	o := *e.RDB.Options()
	o.Username, o.Password = "old", "pw"
	rdb := redis.NewClient(&o)
	t.Cleanup(func() { _ = rdb.Close() })
	r := NewRecorder(shard.NewStore(rdb, e.Layout()), nil)
	r.Count("q", shard.HistEnqueued, 1)
	if err := r.Flush(ctx); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("flush: %v, want NOPERM", err)
	}
	r.Count("q", shard.HistEnqueued, 1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.off || len(r.pending) != 0 || r.timer != nil {
		t.Fatalf("after NOPERM: off %v, %d pending, timer %v", r.off, len(r.pending), r.timer != nil)
	}
}

// TestSamplerMinute: with the real minute, the next sample is 30 s into
// the current minute or, past it, into the next one.
func TestSamplerMinute(t *testing.T) {
	t.Parallel()
	s := NewSampler(nil, nil)
	base := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	for at, want := range map[time.Duration]time.Duration{10 * time.Second: 20 * time.Second, 30 * time.Second: time.Minute, 40 * time.Second: 50 * time.Second} {
		s.now = func() time.Time { return base.Add(at) }
		if got := s.untilNext(); got != want {
			t.Errorf("at :%02d the next sample is in %s, want %s", int(at.Seconds()), got, want)
		}
	}
}
