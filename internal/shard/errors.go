package shard

import "errors"

// Protocol errors. They carry the "hourglass:" prefix because the public
// client returns them unchanged; callers test them with errors.Is.
var (
	// ErrDuplicate reports an enqueue of an id that is still live
	// (scheduled, ready, running or dead). Nothing was changed.
	ErrDuplicate = errors.New("hourglass: task id already exists")
	// ErrUnknownQueue reports a queue that no scheduler has registered.
	ErrUnknownQueue = errors.New("hourglass: unknown queue")
	// ErrPayloadTooLarge reports a payload above the configured maximum.
	ErrPayloadTooLarge = errors.New("hourglass: payload too large")
	// ErrInvalidArgument reports a malformed id, queue, time or option.
	ErrInvalidArgument = errors.New("hourglass: invalid argument")
	// ErrNotFound reports an id that is not stored.
	ErrNotFound = errors.New("hourglass: task not found")
	// ErrActive reports a cancel of a task that is running: leased, or
	// popped by a worker (which runs popped tasks before leasing them).
	ErrActive = errors.New("hourglass: task is running")
	// ErrUndecodable reports stored task data that is not a valid encoding.
	ErrUndecodable = errors.New("hourglass: undecodable task data")
	// ErrStaleToken reports an ack, nack, extend or release whose
	// delivery token is no longer the task's: its lease expired and the
	// task was rescheduled or delivered again.
	ErrStaleToken = errors.New("hourglass: stale delivery token")
	// ErrNotReplicated reports an enqueue that Redis stored but whose
	// copy did not reach the replicas a Durability asked for in time:
	// a failover now may lose it. Sending it again with the same id is
	// safe (ErrDuplicate then says it is stored).
	ErrNotReplicated = errors.New("hourglass: stored, not yet replicated")
	// ErrTryAgain reports an answer with nothing done that will change
	// shortly: send the same call again after a short wait (the client
	// does, for Config.RetryFor). ErrInTransit is one.
	ErrTryAgain = errors.New("hourglass: try again shortly")
	// ErrStaleEpoch reports a fenced script called with an epoch older
	// than the shard's current owner's.
	ErrStaleEpoch = errors.New("shard: stale epoch")
)
