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
// The movers of a scheduler's shards share one combiner: a call made
// while another shard's is in flight waits for it, and the calls that
// waited then go to Redis together, in one round trip (movemany.lua on a
// standalone or Sentinel Redis, a pipeline on a cluster). A call made
// while none is in flight goes at once, alone; a call made because the
// last one left tasks due (a burst) bypasses the combiner, so that every
// shard drains in parallel.
//
// Mover.Run is one of the loops a shard's owner runs (internal/owner).
// Waker delivers the wake-up channels of every owned shard over the
// sharded pub/sub connections of an internal/fanout hub (one connection
// for a standalone Redis).
package scan
