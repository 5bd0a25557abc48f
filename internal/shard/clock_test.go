package shard

import (
	"testing"
	"time"
)

// TestClockReadingLocal: a reading maps a time on the server's clock to
// the earliest local time at which the server surely shows it, whichever
// way the two clocks are off, never earlier than the reading's reply.
func TestClockReadingLocal(t *testing.T) {
	t.Parallel()
	local := time.Now()
	for _, c := range []struct {
		name   string
		offset time.Duration // the server's clock minus the local one
		ahead  time.Duration // t past the reading, on the server's clock
		want   time.Duration // Local(t) past Received
	}{
		{"server ahead, t a second later", 3 * time.Second, time.Second, time.Second + time.Duration(float64(time.Second)*ClockDrift)},
		{"server behind, t 50 ms later", -3 * time.Second, 50 * time.Millisecond, 50*time.Millisecond + time.Duration(float64(50*time.Millisecond)*ClockDrift)},
		{"t already shown", 0, -time.Second, 0},
	} {
		r := ClockReading{Sent: local.Add(-time.Millisecond), Received: local, Redis: local.Add(c.offset)}
		if got := r.Local(r.Redis.Add(c.ahead)).Sub(r.Received); got != c.want {
			t.Errorf("%s: Local is %s past the reply, want %s", c.name, got, c.want)
		}
	}
}
