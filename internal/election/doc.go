// Package election divides Hourglass's N shards between the scheduler
// replicas through etcd, so that each replica owns about N/R of them
// (balanced) and a shard's work runs on at most one live owner at a time,
// each owner carrying a strictly larger epoch than the one before (fenced).
//
// # Keys
//
// Under Config.Prefix, each attached to the lease of the replica that
// wrote it:
//
//	members/<ReplicaID>  value ReplicaID: the replica is alive
//	shards/<%04d shard>  value ReplicaID: the replica owns the shard
//
// Revoking or losing a lease removes the member key and all shard keys of
// that replica in one revision.
//
// # Quota
//
// Each replica keeps a view of both directories from one Get followed by
// one Watch starting at the next revision (re-done after compaction or
// cancellation), and reconciles after every change and on a TTL tick.
// With the members sorted and this replica at index i of R, its quota is
// N/R, plus one if i < N%R: quotas add up to N and each is floor(N/R) or
// ceil(N/R). A replica over quota releases its highest-numbered shards; one
// under quota tries free shards, those with shard%R == i first. Releasing
// a shard cancels its RunFunc, waits for it to return, then deletes the
// key in a txn guarded by value, lease and CreateRevision, so a replica
// can only ever delete its own current key.
//
// # Changing the shard count
//
// Config.Shards is only the initial N; Manager.SetShards changes it at run
// time, for online resharding (grow while a reshard runs, shrink once
// it is done), from any goroutine, before or during Run. Each reconcile
// pass reads the count once and computes the quota and the candidate
// shards from it; SetShards kicks the loop so that the change does not
// wait for the TTL tick. When N grows, every quota grows or stays, so
// replicas only take new shards and no owned shard moves. When N shrinks
// to n, each replica stops and releases the shards >= n it runs, in the
// same order as a rebalance (cancel, wait for RunFunc, delete the key),
// and then balances over shards 0..n-1. A replica only ever drops its
// own keys: keys of shards >= n held by others are left to them. Every
// replica must be told the same count; while they disagree, their quotas
// do not add up and a shard may change hands more than once before they
// settle. The count is bounded by shard.MaxShards.
//
// # Fencing epoch
//
// Acquiring is one txn: if CreateRevision(key) == 0 then put the key on
// our lease. The txn's revision is the key's CreateRevision, the shard's
// epoch; every later owner creates the key again at a higher revision, so
// epochs of a shard strictly increase. RunFunc receives the epoch and
// passes it to the Redis scripts, which reject an older one.
//
// # Self-fencing clock
//
// A replica must stop a shard's work before any other replica can own it,
// even when it cannot reach etcd. It does not trust clientv3's KeepAlive
// stream or concurrency.Session for that. It renews its lease with
// KeepAliveOnce every TTL/3 (each call bounded by TTL/3) and records the
// time before sending. etcd sets the lease's expiry to the time it
// handles the keep-alive plus TTL, which is no earlier than send time plus
// TTL; so after a successful keep-alive sent at t the lease surely lives
// until t+TTL. A watchdog cancels every RunFunc ctx at t+TTL-margin
// (margin = min(500ms, TTL/10)). A replica cut off from etcd (for
// instance etcd paused past the TTL) therefore stops moving tasks before
// the server can expire its lease and let another replica take the
// shards. It then waits for every RunFunc, revokes the old lease (best
// effort, retried after the next grant), and starts over with a new lease,
// a new member key and new campaigns; Ready is false meanwhile.
//
// # etcd traps and their guards
//
//   - A campaign that blocks forever: there is no blocking campaign.
//     Acquiring is a single txn with a timeout; a shard that is taken is
//     waited for by waiting for the next watch event. Every etcd call
//     carries a ctx with a timeout of TTL/3.
//   - A campaign that returns after the session died: work starts only if
//     the txn succeeded and the lease is still valid by the self-fencing
//     clock at that moment; otherwise the key is left to die with the
//     lease.
//   - A session that silently expired, or a keep-alive answered late: the
//     self-fencing clock only counts answered keep-alives, measured from
//     their send time.
//   - A keep-alive or write on an old lease that the server handles late:
//     shard keys on an older lease of ours are not treated as ours; they
//     vanish with that lease, whose revoke is retried after the next grant.
//     A member key that vanishes while the lease is valid is put back.
//   - Missed watch events: the watch starts at the snapshot's revision + 1
//     and a compacted or cancelled watch is replaced by a new snapshot.
//   - A key deleted under a running owner: the run is stopped as soon as
//     the view shows the key gone or re-created by someone else.
//
// # Shutdown
//
// When Run's ctx is cancelled: cancel every RunFunc ctx, wait for all of
// them, revoke the lease (freeing all of this replica's shards in one
// revision, so the others take them within a round trip or two), stop and
// wait for the keep-alive, watchdog and watcher, return.
package election
