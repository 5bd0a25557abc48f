// Package scan runs the mover of each shard a scheduler owns: it calls
// the fenced, LIMIT-bounded move script, repeats while batches come back
// full, then sleeps until the shard's next due time, a wake-up published
// by an enqueue that created a new earliest task, or a long safety
// re-check, whichever comes first. An idle shard costs Redis one script
// call per safety interval.
//
// Mover.Run is one of the loops a shard's owner runs (internal/owner).
// Waker delivers the wake-up channels of every owned shard over the
// sharded pub/sub connections of an internal/fanout hub (one connection
// for a standalone Redis).
package scan
