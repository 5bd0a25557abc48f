package shard

import (
	"strconv"
	"strings"
)

// Keys names every Redis key of a namespace. A name does not depend on
// the shard count: shard s keeps its keys ({ns:s}) in every layout, so
// naming is apart from placement (Layout says which shards exist and
// where an id lives; locate.go how to visit them). The zero Keys is
// invalid; a Layout carries the Keys of its namespace.
type Keys struct {
	ns string
}

// Namespace returns the namespace every key starts with.
func (k Keys) Namespace() string { return k.ns }

// Tag returns the hash tag of shard s, braces included: "{ns:s}".
func (k Keys) Tag(s int) string { return "{" + k.ns + ":" + strconv.Itoa(s) + "}" }

// Delayed is the sorted set of scheduled task ids, scored by due time in
// unix milliseconds. It also holds the member FarSentinel while the far
// tier has buckets, scored by the earliest bucket's promotion time.
func (k Keys) Delayed(s int) string { return k.Tag(s) + ":delayed" }

// Far is the sorted set of the far tier's buckets (see docs/protocol.md):
// member the bucket's start (unix ms), score its promotion time. Bucket b's
// ids are in the list FarBucket(s, b).
func (k Keys) Far(s int) string { return k.Tag(s) + ":far" }

// FarBucket is the list of the far-tier bucket starting at start (unix ms,
// as a member of Far(s)): entries "id|enqueued_ms".
func (k Keys) FarBucket(s int, start string) string { return k.Far(s) + ":" + start }

// FarSentinel is the member of the delayed set that stands for the far
// tier: when it is due, the mover promotes the earliest bucket. It cannot
// clash with a task id, which never contains "|".
const FarSentinel = "|far"

// Tasks is the hash of task id to encoded task.
func (k Keys) Tasks(s int) string { return k.Tag(s) + ":tasks" }

// Window is the debounce window of key in shard s (debounce.lua's
// KEYS[7]), a string "first_ms|end_ms|task id|n" that expires on its own.
func (k Keys) Window(s int, key string) string { return k.Tag(s) + ":window:" + key }

// Reservation marks task id of shard s as reserved (unique.lua's KEYS[7]):
// a string that expires when the reservation ends.
func (k Keys) Reservation(s int, id string) string { return k.Tag(s) + ":unique:" + id }

// ReadyPrefix is the prefix of the shard's ready lists; the queue name
// follows it.
func (k Keys) ReadyPrefix(s int) string { return k.Tag(s) + ":ready:" }

// Periodic is the hash of the periodic schedules whose home is shard s:
// schedule name -> the last occurrence fired or skipped (unix ms).
func (k Keys) Periodic(s int) string { return k.Tag(s) + ":periodic" }

// ScheduleHistoryPrefix is the prefix of the lists of the outcomes of
// the schedules whose home is shard s; the schedule's name follows
// (fire.lua's KEYS[9], ScheduleHistory).
func (k Keys) ScheduleHistoryPrefix(s int) string { return k.Tag(s) + ":periodic:hist:" }

// ScheduleHistory is the list of schedule name's last outcomes in its
// home shard s, newest first.
func (k Keys) ScheduleHistory(s int, name string) string { return k.ScheduleHistoryPrefix(s) + name }

// Ready is the list of due task ids of one queue.
func (k Keys) Ready(s int, queue string) string { return k.ReadyPrefix(s) + queue }

// ReadyChannel is the shard pub/sub channel on which the scripts announce
// that ready list key, empty until then, has entries: the channel has the
// list's name (docs/protocol.md, "Ready announcements").
func ReadyChannel(key string) string { return key }

// PendingPrefix is the prefix of the shard's pending sets; the queue name
// follows it.
func (k Keys) PendingPrefix(s int) string { return k.Tag(s) + ":pending:" }

// Pending is the sorted set of ids of one queue that are ready but not
// leased, scored by their sequence number in the ready list.
func (k Keys) Pending(s int, queue string) string { return k.PendingPrefix(s) + queue }

// FairRing is the ring of a fair queue in shard s (docs/fairness.md): each
// key that has tasks waiting for a turn, once, the key whose turn it is
// first.
func (k Keys) FairRing(s int, queue string) string { return k.Tag(s) + ":fair:" + queue }

// FairList is the list of one key's tasks of a fair queue that wait for a
// turn, as ready entries in due order. Queue names hold no "|".
func (k Keys) FairList(s int, queue, key string) string { return k.FairRing(s, queue) + "|" + key }

// FairLevelList is the list of one key's tasks of a fair queue at
// priority level p (high or low) that wait for a turn; the key's normal
// tasks are in FairList (docs/fairness.md, "Priorities").
func (k Keys) FairLevelList(s int, queue, key string, p Priority) string {
	if p == PriorityNormal {
		return k.FairList(s, queue, key)
	}
	return k.FairList(s, queue, key) + "|" + strconv.Itoa(int(p))
}

// FairLevels is the hash of a fair queue's keys in shard s that have
// tasks of a level other than normal waiting: key -> its stride state
// "pass_normal|pass_high|pass_low|virtual_time" (lib.lua's
// fair_levels_pop).
func (k Keys) FairLevels(s int, queue string) string { return k.Tag(s) + ":fairv:" + queue }

// FairWeights is the hash of a fair queue's key weights in shard s: key ->
// turns per round (1 for a key without a field).
func (k Keys) FairWeights(s int, queue string) string { return k.Tag(s) + ":fairw:" + queue }

// FairParked is the hash of a fair queue's keys in shard s whose due
// tasks the mover left in the delayed set (their lists are full enough):
// key -> "1". A refill that brings such a key's list low wakes the
// shard's owner to move more.
func (k Keys) FairParked(s int, queue string) string { return k.Tag(s) + ":fairp:" + queue }

// FairCaps is the hash of a fair queue's keys' own concurrency caps in
// shard s: key -> cap (0: none); FairHeld is the set of its keys held at
// their cap, off the ring; FairPermits is a key's set of the ids that
// hold its permits (docs/fairness.md, "Limits per key").
func (k Keys) FairCaps(s int, queue string) string { return k.Tag(s) + ":fairc:" + queue }

// FairRates is the hash of a fair queue's keys' own rates in shard s:
// key -> "rate|period_ms|burst" ("0": none); FairBucket is a key's token
// bucket (its theoretical arrival time in µs).
func (k Keys) FairRates(s int, queue string) string { return k.Tag(s) + ":fairq:" + queue }

// FairBucket: see FairRates. It holds a token or leaky bucket's state;
// a fixed window's is in the same key followed by "|f", a sliding
// window's in it followed by "|w" (FairBuckets).
func (k Keys) FairBucket(s int, queue, key string) string {
	return k.Tag(s) + ":fairs:" + queue + "|" + key
}

// FairBuckets returns the keys of a key's rate state, one per kind of
// limiter (FairBucket).
func (k Keys) FairBuckets(s int, queue, key string) []string {
	b := k.FairBucket(s, queue, key)
	return []string{b, b + "|f", b + "|w"}
}

// FairWake is the sorted set of a shard's fair queues' keys held for
// their next token: "queue|key" -> the time (ms) it comes; the queues
// hash's field "|fwnext" holds the earliest (lib.lua's fair_hold).
func (k Keys) FairWake(s int) string { return k.Tag(s) + ":fairwake" }

// FairHeld: see FairCaps.
func (k Keys) FairHeld(s int, queue string) string { return k.Tag(s) + ":fairb:" + queue }

// FairPermits: see FairCaps.
func (k Keys) FairPermits(s int, queue, key string) string {
	return k.Tag(s) + ":fairr:" + queue + "|" + key
}

// FairTurn holds "left|key": the turn the last refill of a fair queue's
// window cut short, which the next one goes on with.
func (k Keys) FairTurn(s int, queue string) string { return k.Tag(s) + ":fairt:" + queue }

// ReadyQueues is the set of queues that have had ready ids in the shard;
// recovery looks for stranded ids in their pending sets.
func (k Keys) ReadyQueues(s int) string { return k.Tag(s) + ":readyqueues" }

// Seq is the shard's counter for ready-list sequence numbers and
// delivery tokens.
func (k Keys) Seq(s int) string { return k.Tag(s) + ":seq" }

// Leases is the hash of leased task id to its delivery token.
func (k Keys) Leases(s int) string { return k.Tag(s) + ":leases" }

// Errors is the hash of task id to the last error of a failed delivery.
func (k Keys) Errors(s int) string { return k.Tag(s) + ":errors" }

// Inflight is the sorted set of leased task ids, scored by lease deadline.
func (k Keys) Inflight(s int) string { return k.Tag(s) + ":inflight" }

// Dead is the dead-letter sorted set, scored by the time a task was buried.
func (k Keys) Dead(s int) string { return k.Tag(s) + ":dead" }

// DeadInfo is the hash of task id to a JSON record of why it was buried.
func (k Keys) DeadInfo(s int) string { return k.Tag(s) + ":dead:info" }

// Counts is the hash of the shard's task counts by state and queue:
// field "s|<queue>" scheduled (the far tier included), "l|<queue>" leased,
// "d|<queue>" dead ("d|" for dead data that names no queue). The scripts
// keep them as tasks change state; ready tasks are counted by the lengths
// of their lists instead.
func (k Keys) Counts(s int) string { return k.Tag(s) + ":counts" }

// Paused is the hash of paused queues to the time they were paused (unix
// ms), one key for the deployment (its own Cluster slot).
func (k Keys) Paused() string { return "{" + k.ns + "}:paused" }

// PausedSchedules is the hash of paused periodic schedules to the time
// they were paused (unix ms), one key for the deployment.
func (k Keys) PausedSchedules() string { return "{" + k.ns + "}:periodic:paused" }

// ScheduleDefs is the hash of the periodic schedules registered at run
// time (inspect.SetSchedule): name -> the schedule as JSON (package
// periodic), one key for the deployment.
func (k Keys) ScheduleDefs() string { return "{" + k.ns + "}:periodic:defs" }

// ControlChannel is the classic pub/sub channel on which pause and resume
// are announced ("pause <queue>", "resume <queue>"); workers re-read
// Paused when they hear it, and when they (re)subscribe.
func (k Keys) ControlChannel() string { return "{" + k.ns + "}:control" }

// CancelChannel is the deployment's channel on which cancel.lua publishes
// the id of a running task it cancelled: the worker running it cancels
// its handler's ctx.
func (k Keys) CancelChannel() string { return "{" + k.ns + "}:cancel" }

// Ended is shard s's HASH of the records of tasks that ended, kept for
// their queue's retention: task id -> "state|<unix ms>|<state it ended
// from>|<queue>|<result>" (lua/lib.lua's record_end). EndedIndex orders
// them by time, per queue.
func (k Keys) Ended(s int) string { return k.Tag(s) + ":ended" }

// EndedIndexPrefix is the prefix of shard s's ended indexes; the queue
// name follows it.
func (k Keys) EndedIndexPrefix(s int) string { return k.Tag(s) + ":endedq:" }

// EndedIndex is the ZSET of queue's ended task ids in shard s, scored by
// the time they ended: the retention's age and count bounds read it.
func (k Keys) EndedIndex(s int, queue string) string { return k.EndedIndexPrefix(s) + queue }

// DonePrefix is the prefix of the classic pub/sub channels on which the
// scripts publish a task's final state ("succeeded", "dead",
// "cancelled") when its queue keeps records of its ended tasks; the task
// id follows it. Client.Wait subscribes to its task's channel.
func (k Keys) DonePrefix() string { return "{" + k.ns + "}:done:" }

// Done is the done channel of task id (DonePrefix).
func (k Keys) Done(id string) string { return k.DonePrefix() + id }

// QueueHistoryPrefix is the prefix of the queues' minute histories,
// one key for the deployment's slot ({ns}); the queue name, ":" and the
// UTC day (yyyymmdd) follow (QueueHistory, queuehist.lua).
func (k Keys) QueueHistoryPrefix() string { return "{" + k.ns + "}:qhist:" }

// QueueHistory is queue's minute history of UTC day "yyyymmdd".
func (k Keys) QueueHistory(queue, day string) string {
	return k.QueueHistoryPrefix() + queue + ":" + day
}

// Procs is the process registry's hash, one key for the deployment:
// process id -> its entry as JSON (package procs).
func (k Keys) Procs() string { return "{" + k.ns + "}:procs" }

// Registered is set by a scheduler once it has registered its queues:
// its absence tells the schedulers that Redis lost its data (a restart
// without persistence, a flush) and that the queues must be registered
// again.
func (k Keys) Registered() string { return "{" + k.ns + "}:registered" }

// WaitMark is the counter a durable enqueue writes before its WAIT
// (Durability).
func (k Keys) WaitMark() string { return "{" + k.ns + "}:waitmark" }

// Epoch holds the fencing epoch of the shard's current owner.
func (k Keys) Epoch(s int) string { return k.Tag(s) + ":epoch" }

// Queues is the hash of registered queue name to its enqueue policy.
func (k Keys) Queues(s int) string { return k.Tag(s) + ":queues" }

// queuesOfShard0 is the Queues key of shard 0 of any namespace, as a
// SCAN pattern: it exists wherever queues are registered (shard 0 exists
// in every layout), so it marks the namespaces in use (Namespaces).
const queuesOfShard0 = "{*:0}:queues"

// namespaceOfQueues returns the namespace of key, a match of
// queuesOfShard0; false for a key no namespace names that way.
func namespaceOfQueues(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, "{")
	if !ok {
		return "", false
	}
	ns, ok := strings.CutSuffix(rest, ":0}:queues")
	if !ok || !ValidNamespace(ns) || (Keys{ns: ns}).Queues(0) != key {
		return "", false
	}
	return ns, true
}

// Stats is the hash of the shard's counters (stale_epoch, ...).
func (k Keys) Stats(s int) string { return k.Tag(s) + ":stats" }

// WakeChannel is the shard pub/sub channel on which enqueues that create
// a new earliest task publish its due time.
func (k Keys) WakeChannel(s int) string { return k.Tag(s) + ":wake" }

// FlowName is the name of queue's cluster-wide flow-control primitives
// (coord's semaphore and token bucket), "namespace:flow:queue". coord
// builds their keys from it ({name}:sem, rate:{name}:tb), so they share
// one hash tag per queue (one Cluster slot) and no shard's keys.
func (k Keys) FlowName(queue string) string { return k.ns + ":flow:" + queue }

// Keys of changing the shard count (layout.go, reshard.go).

// Record is the layout record, one key for the deployment.
func (k Keys) Record() string { return "{" + k.ns + "}:layout" }

// Marker is shard s's copy of the layout, "gen|shards|from" (a count
// followed by "k" when its tasks are placed by key), which enqueue.lua
// checks (KEYS[6]) against the producer's generation.
func (k Keys) Marker(s int) string { return k.Tag(s) + ":layout" }

// Outbox is the hash of the tasks shard s is moving to another shard:
// id -> placement and task (reshard.lua's export).
func (k Keys) Outbox(s int) string { return k.Tag(s) + ":outbox" }

// Cancelled is the hash of the outbox entries of shard s that were
// cancelled on their way (cancel.lua): the reshard removes their
// imported copies, then the entries (Forget).
func (k Keys) Cancelled(s int) string { return k.Tag(s) + ":outbox:cancelled" }

// Imported is the set of ids shard s received from other shards during
// the change to generation gen, so that a repeated import cannot store a
// task twice.
func (k Keys) Imported(s int, gen int64) string {
	return k.Tag(s) + ":imported:" + strconv.FormatInt(gen, 10)
}
