package worker

import (
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestClockKeepsTheBetterReading: a held task whose server's reading was
// last checked more than ClockReadAge ago reads the clock again, and the
// reading that holds the task for less is kept: a new one over an old one
// whose reply took 50 ms, and an old one whose reply was instant over any
// new one (which then only counts as a check).
func TestClockKeepsTheBetterReading(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shard.QueuePolicy{MaxRetries: 3, Timeout: 30 * time.Second})
	c := newRedisClock(e.Store, time.Now, hclog.NewNullLogger())
	ctx := testenv.Ctx(t, 10*time.Second)
	stale := time.Now().Add(-2 * shard.ClockReadAge)
	for _, tc := range []struct {
		name    string
		lag     time.Duration // how far Redis's clock in the old reading trails its reply
		keepOld bool
	}{
		{"slow old reading", 50 * time.Millisecond, false},
		// Redis's clock 10 ms ahead of the reply: impossible on one host,
		// so no real reading can beat it.
		{"instant old reading", -10 * time.Millisecond, true},
	} {
		old := &shard.ClockReading{Sent: stale, Received: stale, Redis: stale.Add(-tc.lag)}
		src := c.source(0)
		src.reading.Store(old)
		due := time.Now().Add(100 * time.Millisecond)
		c.startAt(ctx, 0, due)
		got := src.reading.Load()
		switch {
		case tc.keepOld && (got.Redis != old.Redis || got.Checked.Before(old.Received.Add(shard.ClockReadAge))):
			t.Errorf("%s: kept %+v, want the old reading marked as checked now", tc.name, got)
		case !tc.keepOld && got.Redis == old.Redis:
			t.Errorf("%s: kept the old reading, want the new one", tc.name)
		}
	}
}
