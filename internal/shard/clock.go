package shard

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/errtext"
)

// ClockReading is one reading of a Redis server's clock by a process:
// Redis's TIME, and the process's own clock just before the call was sent
// and just after its reply was read. Redis read its clock in between, so
// at the local time Received, Redis's clock showed at least Redis.
type ClockReading struct {
	Sent, Received time.Time // the reader's clock (with its monotonic reading)
	Redis          time.Time
	// Checked is when a later reading was taken and found no better
	// (zero: none was).
	Checked time.Time
}

// LastChecked is when the reading was last compared with the server's
// clock: Checked, or Received.
func (r ClockReading) LastChecked() time.Time {
	if r.Checked.IsZero() {
		return r.Received
	}
	return r.Checked
}

// Local returns the earliest time on the reader's clock at which the
// server's clock surely shows t or later: t's distance from the reading
// on the server's clock, past Received, stretched by ClockDrift for the
// two clocks' rates. It never comes before the server's clock reaches t,
// however far the reader's clock is ahead of or behind the server's; it
// is late by at most the round trip plus the drift allowance.
func (r ClockReading) Local(t time.Time) time.Time {
	d := t.Sub(r.Redis)
	if d <= 0 {
		return r.Received
	}
	return r.Received.Add(d + time.Duration(float64(d)*ClockDrift))
}

// ClockSource names the server whose clock holds shard sh's due times
// for a reading: 0 for every shard when one server holds them all
// (standalone, Sentinel), the shard itself on a Redis Cluster or a Ring,
// where shards live on several servers, each with its own clock.
func (s *Store) ClockSource(sh int) int {
	switch s.rdb.(type) {
	case *redis.ClusterClient, *redis.Ring:
		return sh
	}
	return 0
}

// ReadClock reads the clock of the server that holds shard sh (time.lua),
// bracketing the call with now, the reader's clock.
func (s *Store) ReadClock(ctx context.Context, sh int, now func() time.Time) (ClockReading, error) {
	sent := now()
	v, err := timeScript.Run(ctx, s.rdb, []string{s.k.Delayed(sh)}).StringSlice()
	received := now()
	if err != nil {
		return ClockReading{}, errtext.Errorf("read the clock of shard %d: %w", sh, err)
	}
	if len(v) != 2 {
		return ClockReading{}, errtext.Errorf("read the clock of shard %d: TIME replied %q", sh, v)
	}
	sec, err1 := strconv.ParseInt(v[0], 10, 64)
	usec, err2 := strconv.ParseInt(v[1], 10, 64)
	if err1 != nil || err2 != nil {
		return ClockReading{}, errtext.Errorf("read the clock of shard %d: TIME replied %q", sh, v)
	}
	return ClockReading{Sent: sent, Received: received, Redis: time.Unix(sec, usec*1000)}, nil
}
