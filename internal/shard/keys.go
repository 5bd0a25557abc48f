package shard

import (
	"errors"
	"fmt"
	"hash/crc32"
	"regexp"
	"strconv"
	"strings"
)

// ErrInvalidLayout is returned by NewLayout for a bad namespace or count.
var ErrInvalidLayout = errors.New("shard: invalid layout")

var namespaceRE = regexp.MustCompile(NamespaceRule)

// NamespaceRule describes the legal namespaces, for error messages.
const NamespaceRule = `^[A-Za-z0-9_-]{1,32}$`

// ValidNamespace reports whether ns is a legal namespace.
func ValidNamespace(ns string) bool { return namespaceRE.MatchString(ns) }

// Layout names every Redis key of a deployment. It is a value type; the
// zero Layout is invalid, build one with NewLayout.
//
// A layout also has a generation: 0 for a deployment that was never
// resized, incremented by every change of the shard count (layout.go).
// While a change runs, From is the shard count being left: tasks are
// placed by Shards, and shards up to Span exist.
type Layout struct {
	ns     string
	shards int
	gen    int64
	from   int // 0: stable
}

// NewLayout returns the layout for namespace ns with n shards.
func NewLayout(ns string, n int) (Layout, error) {
	if !ValidNamespace(ns) {
		return Layout{}, fmt.Errorf("%w: namespace %q must match %s", ErrInvalidLayout, ns, NamespaceRule)
	}
	if n < 1 || n > MaxShards {
		return Layout{}, fmt.Errorf("%w: shard count %d not in 1..%d", ErrInvalidLayout, n, MaxShards)
	}
	return Layout{ns: ns, shards: n}, nil
}

// Deployment defaults shared by the client, the worker and the
// configuration: every producer and consumer must agree on them.
const (
	DefaultNamespace = "hourglass"
	DefaultShards    = 16
)

// LayoutDefaults returns ns and n with "" and 0 replaced by
// DefaultNamespace and DefaultShards, for configs whose zero values mean
// the defaults: NewLayout(LayoutDefaults(ns, n)) validates them.
func LayoutDefaults(ns string, n int) (string, int) {
	if ns == "" {
		ns = DefaultNamespace
	}
	if n == 0 {
		n = DefaultShards
	}
	return ns, n
}

// MaxShards is the largest supported shard count.
const MaxShards = 4096

// Namespace returns the namespace every key starts with.
func (l Layout) Namespace() string { return l.ns }

// Shards returns the shard count N: new tasks are placed by it.
func (l Layout) Shards() int { return l.shards }

// Gen returns the layout's generation (0: never resized).
func (l Layout) Gen() int64 { return l.gen }

// From returns the shard count a running change leaves, 0 when stable.
func (l Layout) From() int { return l.from }

// Migrating reports whether a change of the shard count is running.
func (l Layout) Migrating() bool { return l.from > 0 }

// Span returns the number of shards that exist: Shards, or the larger of
// Shards and From while a change runs. Owners and workers cover shards
// 0..Span-1.
func (l Layout) Span() int { return max(l.shards, l.from) }

// OldShardOf returns the shard of id in the layout being left, or
// ShardOf when stable.
func (l Layout) OldShardOf(id string) int {
	if l.from == 0 {
		return l.ShardOf(id)
	}
	return int(crc32.ChecksumIEEE([]byte(id)) % uint32(l.from))
}

// ShardOf returns the shard of a task id: crc32 (IEEE) of the id's bytes
// modulo N. Producers in other languages compute the same (for example
// Python's zlib.crc32).
func (l Layout) ShardOf(id string) int {
	return int(crc32.ChecksumIEEE([]byte(id)) % uint32(l.shards))
}

// Tag returns the hash tag of shard s, braces included: "{ns:s}".
func (l Layout) Tag(s int) string { return "{" + l.ns + ":" + strconv.Itoa(s) + "}" }

// Delayed is the sorted set of scheduled task ids, scored by due time in
// unix milliseconds. It also holds the member FarSentinel while the far
// tier has buckets, scored by the earliest bucket's promotion time.
func (l Layout) Delayed(s int) string { return l.Tag(s) + ":delayed" }

// Far is the sorted set of the far tier's buckets (see docs/protocol.md):
// member the bucket's start (unix ms), score its promotion time. Bucket b's
// ids are in the list FarBucket(s, b).
func (l Layout) Far(s int) string { return l.Tag(s) + ":far" }

// FarBucket is the list of the far-tier bucket starting at start (unix ms,
// as a member of Far(s)): entries "id|enqueued_ms".
func (l Layout) FarBucket(s int, start string) string { return l.Far(s) + ":" + start }

// FarSentinel is the member of the delayed set that stands for the far
// tier: when it is due, the mover promotes the earliest bucket. It cannot
// clash with a task id, which never contains "|".
const FarSentinel = "|far"

// Tasks is the hash of task id to encoded task.
func (l Layout) Tasks(s int) string { return l.Tag(s) + ":tasks" }

// ReadyPrefix is the prefix of the shard's ready lists; the queue name
// follows it.
func (l Layout) ReadyPrefix(s int) string { return l.Tag(s) + ":ready:" }

// Periodic is the hash of the periodic schedules whose home is shard s:
// schedule name -> the last occurrence fired or skipped (unix ms).
func (l Layout) Periodic(s int) string { return l.Tag(s) + ":periodic" }

// Ready is the list of due task ids of one queue.
func (l Layout) Ready(s int, queue string) string { return l.ReadyPrefix(s) + queue }

// ReadyChannel is the shard pub/sub channel on which the scripts announce
// that ready list key, empty until then, has entries: the channel has the
// list's name (docs/protocol.md, "Ready announcements").
func ReadyChannel(key string) string { return key }

// PendingPrefix is the prefix of the shard's pending sets; the queue name
// follows it.
func (l Layout) PendingPrefix(s int) string { return l.Tag(s) + ":pending:" }

// Pending is the sorted set of ids of one queue that are ready but not
// leased, scored by their sequence number in the ready list.
func (l Layout) Pending(s int, queue string) string { return l.PendingPrefix(s) + queue }

// ReadyQueues is the set of queues that have had ready ids in the shard;
// recovery looks for stranded ids in their pending sets.
func (l Layout) ReadyQueues(s int) string { return l.Tag(s) + ":readyqueues" }

// Seq is the shard's counter for ready-list sequence numbers and
// delivery tokens.
func (l Layout) Seq(s int) string { return l.Tag(s) + ":seq" }

// Leases is the hash of leased task id to its delivery token.
func (l Layout) Leases(s int) string { return l.Tag(s) + ":leases" }

// Errors is the hash of task id to the last error of a failed delivery.
func (l Layout) Errors(s int) string { return l.Tag(s) + ":errors" }

// Inflight is the sorted set of leased task ids, scored by lease deadline.
func (l Layout) Inflight(s int) string { return l.Tag(s) + ":inflight" }

// Dead is the dead-letter sorted set, scored by the time a task was buried.
func (l Layout) Dead(s int) string { return l.Tag(s) + ":dead" }

// DeadInfo is the hash of task id to a JSON record of why it was buried.
func (l Layout) DeadInfo(s int) string { return l.Tag(s) + ":dead:info" }

// Counts is the hash of the shard's task counts by state and queue:
// field "s|<queue>" scheduled (the far tier included), "l|<queue>" leased,
// "d|<queue>" dead ("d|" for dead data that names no queue). The scripts
// keep them as tasks change state; ready tasks are counted by the lengths
// of their lists instead.
func (l Layout) Counts(s int) string { return l.Tag(s) + ":counts" }

// Paused is the hash of paused queues to the time they were paused (unix
// ms), one key for the deployment (its own Cluster slot).
func (l Layout) Paused() string { return "{" + l.ns + "}:paused" }

// PausedSchedules is the hash of paused periodic schedules to the time
// they were paused (unix ms), one key for the deployment.
func (l Layout) PausedSchedules() string { return "{" + l.ns + "}:periodic:paused" }

// ScheduleDefs is the hash of the periodic schedules registered at run
// time (inspect.SetSchedule): name -> the schedule as JSON (package
// periodic), one key for the deployment.
func (l Layout) ScheduleDefs() string { return "{" + l.ns + "}:periodic:defs" }

// ControlChannel is the classic pub/sub channel on which pause and resume
// are announced ("pause <queue>", "resume <queue>"); workers re-read
// Paused when they hear it, and when they (re)subscribe.
func (l Layout) ControlChannel() string { return "{" + l.ns + "}:control" }

// Registered is set by a scheduler once it has registered its queues:
// its absence tells the schedulers that Redis lost its data (a restart
// without persistence, a flush) and that the queues must be registered
// again.
func (l Layout) Registered() string { return "{" + l.ns + "}:registered" }

// WaitMark is the counter a durable enqueue writes before its WAIT
// (Durability).
func (l Layout) WaitMark() string { return "{" + l.ns + "}:waitmark" }

// Epoch holds the fencing epoch of the shard's current owner.
func (l Layout) Epoch(s int) string { return l.Tag(s) + ":epoch" }

// Queues is the hash of registered queue name to its enqueue policy.
func (l Layout) Queues(s int) string { return l.Tag(s) + ":queues" }

// Stats is the hash of the shard's counters (stale_epoch, ...).
func (l Layout) Stats(s int) string { return l.Tag(s) + ":stats" }

// WakeChannel is the shard pub/sub channel on which enqueues that create
// a new earliest task publish its due time.
func (l Layout) WakeChannel(s int) string { return l.Tag(s) + ":wake" }

// ReadyKeys returns the ready lists of the given queues in every shard
// (up to Span),
// in shard order; workers block on them with Pop.
func (l Layout) ReadyKeys(queues []string) []string {
	keys := make([]string, 0, l.Span()*len(queues))
	for sh := 0; sh < l.Span(); sh++ {
		for _, q := range queues {
			keys = append(keys, l.Ready(sh, q))
		}
	}
	return keys
}

// ParseReady returns the shard and queue of a ready-list key.
func (l Layout) ParseReady(key string) (sh int, queue string, ok bool) {
	rest, ok := strings.CutPrefix(key, "{"+l.ns+":")
	if !ok {
		return 0, "", false
	}
	num, q, ok := strings.Cut(rest, "}:ready:")
	if !ok {
		return 0, "", false
	}
	sh, err := strconv.Atoi(num)
	if err != nil || sh < 0 || sh >= l.Span() {
		return 0, "", false
	}
	return sh, q, true
}

// FlowName is the name of queue's cluster-wide flow-control primitives
// (coord's semaphore and token bucket), "namespace:flow:queue". coord
// builds their keys from it ({name}:sem, rate:{name}:tb), so they share
// one hash tag per queue (one Cluster slot) and no shard's keys.
func (l Layout) FlowName(queue string) string { return l.ns + ":flow:" + queue }
