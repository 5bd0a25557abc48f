// Package coord provides coordination primitives on Redis for processes
// that share one Redis: a Lock, a Semaphore with expiring permits, a
// writer-preferring RWLock, a condition variable of a Lock (Cond), and
// four rate limiters (TokenBucket, SlidingWindow, FixedWindow,
// LeakyBucket). docs/coordination.md explains when to use which.
//
// Each operation is one Lua script (embedded from lua/*.lua; the token
// bucket uses the redis_rate library's GCRA script) that runs atomically
// in Redis and reads time from the Redis server (TIME, or key expiry),
// never from the caller, so processes with skewed clocks agree.
//
// # Keys
//
// The caller names each primitive; its keys are "{name}:suffix", so all
// keys of one primitive share the hash tag {name} and live in one Redis
// Cluster slot, as its scripts require. Names must not contain braces.
// Keys expire once nothing holds them, except the fencing counters of
// WithFencing.
//
// # Blocking acquisition and connections
//
// Lock.Acquire, Semaphore.Acquire, RWLock.AcquireRead/AcquireWrite and
// Cond.Wait never poll Redis in a loop (a Cond's waiter refreshes its
// liveness, see Cond). A blocked acquirer waits for a wake-up
// published by the release script on the primitive's pub/sub channel,
// and at the latest until the blocker could have expired without a
// release (the holder's remaining lease, the earliest permit expiry), then
// tries again; ctx cancellation is honoured at once and leaves nothing
// held. All blocked acquirers of a process that use the same client share
// one pub/sub connection, opened when the first of them starts waiting and
// closed when the last one stops: N concurrent blocked acquirers use one
// connection, not N, plus a pooled connection for the brief duration of
// each attempt. (A redis.Ring shards channels like keys; with a Ring each
// primitive that has waiters gets its own pub/sub connection.) A release wakes one waiter per process (all waiters for
// an RWLock). go-redis re-subscribes after a dropped connection, and each
// re-subscription wakes the waiters to retry, so a release published
// while the connection was down costs latency, not a lost wake-up.
//
// # Guarantees and their limits
//
// While the Redis primary keeps its data, the primitives do what they
// say. Two things break them, and callers must decide how much that
// matters:
//
//   - Redis failover. Replication is asynchronous: a replica promoted
//     after a crash can lack the last writes, so a lock or permit granted
//     just before can be granted again. A lock that must never be held
//     twice needs a consensus store (etcd) or fencing.
//   - A paused holder. A holder stopped (GC pause, SIGSTOP, a slow disk)
//     or cut off for longer than its lease loses the lease without
//     knowing; another process may then acquire. Keep leases longer than
//     the pauses you must survive, extend them (Lease.Extend, WithWatchdog,
//     Semaphore.Refresh), and fence writes with WithFencing's tokens when
//     a double holder would corrupt data.
//
// Errors wrap the sentinels ErrNotHeld and ErrNotAcquired, the caller's
// ctx error, or the Redis error, and name the operation and primitive; an
// invalid name, duration or count wraps hourglass.ErrInvalidArgument.
// Their messages start with "hourglass: ", as every public package's do.
package coord
