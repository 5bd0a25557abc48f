// Package scan runs the mover of each shard a scheduler owns: it calls
// the fenced, LIMIT-bounded move script, repeats while batches come back
// full, then sleeps until the shard's next due time, a wake-up published
// by an enqueue that created a new earliest task, or a re-check,
// whichever comes first: the safety re-check (30 s) until Redis has
// confirmed the shard's wake-up subscription, the longer idle re-check (5
// min) from then on. An idle shard costs Redis one script call per
// safety re-check, then one read of its delayed set's head per idle
// re-check (the script only if the head changed).
//
// Mover.Run is one of the loops a shard's owner runs (internal/owner).
// Waker delivers the wake-up channels of every owned shard over the
// sharded pub/sub connections of an internal/fanout hub (one connection
// for a standalone Redis).
package scan
