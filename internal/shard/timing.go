package shard

import "time"

// Protocol timing. A task popped from a ready list and not leased yet is
// safe with the worker that popped it for UnleasedGrace: recovery takes it
// back no sooner. Everything a worker may do with such a task before it
// leases or settles it, and everything the scheduler's prefetch asks a
// worker to wait, must fit inside that time with a margin. The bounds are
// defined together here so that the sums can be read, and
// TestTimingBoundsCompose checks them:
//
//	pop sent ──reply read, handler may start unleased only until
//	    MaxLeaseAfter (later: leased first, dropped if taken back)
//	pop sent ──LeaseAfter (≤ MaxLeaseAfter)──► late lease, retried until
//	    UnleasedGrace − LeaseMargin ──► the worker gives the task up
//	pop ──handler done ≤ MaxLeaseAfter──► ack waits ≤ MaxAckLinger ──► sent
//	pop ──held until due (≤ MaxHold)──► handler starts; leased as above,
//	    at MaxLeaseAfter after the pop when held longer (a staged batch)
//	recovery: a popped, unleased id seen at two checks StrandedMinAge apart
//	    is taken back (a failed attempt); StrandedMinAge ≥ UnleasedGrace
const (
	// UnleasedGrace is the shortest time for which a task popped from a
	// ready list and not leased stays with the worker that popped it.
	UnleasedGrace = time.Second

	// StrandedMinAge is how far apart the two recovery checks that see an
	// id popped and unleased must be before recovery takes it back. It is
	// what makes UnleasedGrace hold: the first check comes after the pop.
	StrandedMinAge = UnleasedGrace

	// MaxLeaseAfter bounds how long a worker runs a popped task before it
	// leases it (worker.QueueOptions.LeaseAfter); a task held until its
	// due time is leased this long after its pop at the latest.
	MaxLeaseAfter = 500 * time.Millisecond

	// LeaseMargin is how long before UnleasedGrace runs out a worker stops
	// retrying the late lease of a running task and cancels its handler:
	// recovery may take the task back after that.
	LeaseMargin = 200 * time.Millisecond

	// MaxAckLinger bounds how long an acknowledgement may wait for others
	// to share its round trip (worker.Config.AckLinger). An unleased
	// delivery's ack lingers too.
	MaxAckLinger = 50 * time.Millisecond

	// MaxPrefetch bounds how far ahead of their due time tasks are moved
	// (scheduler.prefetch, Store.MoveAhead), but for a dense batch (see
	// MaxStage). A worker holds such a task, popped and unleased, until it
	// is due.
	MaxPrefetch = 250 * time.Millisecond

	// MaxStage bounds how far ahead of their due time a mover moves the
	// tasks of a dense batch (internal/scan: many tasks due within one
	// prefetch window, a burst): it starts early enough for the batch to
	// be in its ready lists when it is due, and its tasks are moved at
	// most this long ahead. Only with a prefetch (scheduler.prefetch > 0).
	MaxStage = time.Second

	// HoldSlack is the clock jitter between a worker and Redis that a hold
	// tolerates beyond MaxStage.
	HoldSlack = 50 * time.Millisecond

	// MaxHold is the furthest ahead of a worker's clock that a popped
	// task's due time may lie and the worker still hold it; beyond it the
	// worker's clock is behind Redis's and the task runs at once.
	MaxHold = MaxStage + HoldSlack

	// ClockDrift bounds how fast a worker's clock and a Redis server's
	// may run apart between two readings (ClockReading): 100 µs a second,
	// ten times what NTP-disciplined clocks drift. A worker holds a task
	// on Redis's clock with this allowance.
	ClockDrift = 100e-6

	// ClockReadAge is how long after its last check of a server's clock
	// a worker holding a task reads it again (keeping the better of the
	// two readings): the drift allowance grows by at most 0.2 ms in
	// between. Readings are taken only while tasks are held, so an idle
	// worker reads none.
	ClockReadAge = 2 * time.Second
)

// Following the layout record (follow.go).
const (
	// DefaultLayoutRefresh is how often a process re-reads the layout
	// record besides announcements on the control channel and ids not
	// found: a safety net for an announcement lost without a reconnect,
	// and, for a producer (which does not subscribe), how soon it learns
	// that a change of the shard count ended. MinLayoutRefresh bounds it
	// below.
	DefaultLayoutRefresh = time.Minute
	MinLayoutRefresh     = time.Second

	// PreparingGrace is how long a change of the shard count may stay
	// "preparing" before a scheduler's follower finishes setting it up
	// (BeginResize again: the resize that began it stopped). Producers on
	// the old count wait meanwhile (TRYAGAIN), so it is short; a resize
	// sets a change up in well under a second.
	PreparingGrace = 10 * time.Second
)
