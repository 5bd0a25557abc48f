package shard

import (
	"slices"
	"strings"
)

// The Redis ACL of each Hourglass component, stated once: docs/operations.md
// renders it ("Redis ACL per component"; go test ./internal/shard -run
// TestACLDocs with UPDATE_REDIS_ACL=1 rewrites it), a test checks that
// each component's commands cover those of the scripts it runs, and the
// end-to-end test e2e.TestLeastPrivilegeACLs runs a scheduler, a worker,
// a producer and the admin API each as its own user with exactly these
// rules, and fails on any command, key or channel Redis refused them.
//
// Redis checks every command a script runs against the caller's ACL, so
// a component needs its scripts' commands and keys as well as EVALSHA.
// Keys are named by patterns built from Keys (this file follows keys.go):
// "{ns:[0-9]*}:tasks" is every shard's task hash. A key a script
// declares (KEYS) must be writable, whatever the script does with it:
// Redis takes EVALSHA's keys as read-write. A key a component only reads
// with its own commands is read-only (%R~, Redis 7.0).

// ACLUser is the ACL of one component.
type ACLUser struct {
	// Component is "scheduler", "worker", "producer" or "admin"; the
	// suggested user name is "hourglass-" + Component.
	Component string
	// Does says, for the docs, what the component does with Redis.
	Does string
	// Scripts are the scripts of lua/ it runs (EVALSHA; EVAL, or SCRIPT
	// LOAD before a pipelined retry, when Redis lost its script cache).
	Scripts []string
	// Commands are the commands it needs, those its scripts call
	// included, in lower case ("client|setinfo" for a subcommand).
	Commands []string
	// Keys are the key patterns it may use, each read-only or not.
	Keys []ACLKey
	// Channels are the pub/sub channels (classic and sharded) it may
	// publish or subscribe to.
	Channels []string
}

// ACLKey is a key pattern and whether it may be written.
type ACLKey struct {
	Pattern string
	Write   bool
}

// Rules returns the user's rules as ACL SETUSER takes them after the
// user name (and "on", ">password"): its keys, its channels, then no
// command but its own.
func (u ACLUser) Rules() []string {
	out := []string{"resetkeys"}
	for _, k := range u.Keys {
		if k.Write {
			out = append(out, "~"+k.Pattern)
		} else {
			out = append(out, "%R~"+k.Pattern)
		}
	}
	out = append(out, "resetchannels")
	for _, c := range u.Channels {
		out = append(out, "&"+c)
	}
	out = append(out, "-@all")
	for _, c := range u.Commands {
		out = append(out, "+"+c)
	}
	return out
}

// aclCommands are what every component sends besides its scripts'
// commands: the script calls themselves. (go-redis's HELLO needs no
// permission; AUTH neither.)
var aclCommands = []string{"evalsha", "eval", "script|load"}

// ACLUsers returns the ACL of each component of namespace ns.
func ACLUsers(ns string) []ACLUser {
	k := Keys{ns: ns}
	tag := k.Tag(0)
	// shardKey is every shard's key that name gives.
	shardKey := func(name func(int) string) string {
		return "{" + ns + ":[0-9]*}" + strings.TrimPrefix(name(0), tag)
	}
	prefix := func(p func(int) string) func(int) string {
		return func(s int) string { return p(s) + "*" }
	}
	far := func(s int) string { return k.FarBucket(s, "*") }
	window := func(s int) string { return k.Window(s, "") }
	reservation := func(s int) string { return k.Reservation(s, "") }
	fair := func(s int) string { return k.Tag(s) + ":fair*" } // FairRing, FairList, FairWeights, FairTurn, FairParked, FairCaps, FairHeld, FairPermits
	imported := func(s int) string { return strings.TrimSuffix(k.Imported(s, 0), "0") + "*" }
	r := func(name func(int) string) ACLKey { return ACLKey{Pattern: shardKey(name)} }
	w := func(name func(int) string) ACLKey { return ACLKey{Pattern: shardKey(name), Write: true} }
	rd := func(key string) ACLKey { return ACLKey{Pattern: key} }
	wr := func(key string) ACLKey { return ACLKey{Pattern: key, Write: true} }
	flow := "{" + k.FlowName("*") + "}"
	wake, ready := shardKey(k.WakeChannel), shardKey(prefix(k.ReadyPrefix))
	done := k.DonePrefix() + "*"
	qhist := wr(k.QueueHistoryPrefix() + "*")

	users := []ACLUser{
		{
			Component: "scheduler",
			Does: "owns shards: moves due tasks, recovers expired leases, fires periodic schedules, moves tasks while the shard count changes, " +
				"registers its queues; serves the dashboard (inspect's reads and changes)",
			Scripts: []string{"move.lua", "movemany.lua", "recover.lua", "fire.lua", "enqueue.lua", "depth.lua", "registry.lua", "layout.lua", "scanids.lua",
				"export.lua", "import.lua", "commit.lua", "unimport.lua", "handoff.lua", "adopt.lua",
				"page.lua", "pagefar.lua", "pageready.lua", "deadops.lua", "pause.lua", "cancel.lua", "change.lua", "lookup.lua", "fairrefill.lua", "queuehist.lua"},
			Commands: []string{"ping", "client|list", "client|setname", "del", "exists", "expire", "get", "set", "incr", "incrby", "time", "bitfield", "getrange", "pexpireat",
				"hdel", "hexists", "hget", "hgetall", "hincrby", "hmget", "hscan", "hset", "hsetnx",
				"lindex", "llen", "lpop", "lpos", "lpush", "lrange", "lrem", "lset", "ltrim", "rpush", "pexpire",
				"sadd", "scard", "sismember", "smembers", "srandmember", "srem",
				"zadd", "zcard", "zcount", "zmscore", "zrange", "zrank", "zrem", "zremrangebyscore", "zrevrange", "zrevrank", "zscan", "zscore",
				"publish", "spublish", "subscribe", "ssubscribe", "unsubscribe", "sunsubscribe"},
			Keys: []ACLKey{
				w(k.Delayed), w(k.Tasks), w(k.Far), w(far), w(k.Counts), w(k.Queues), w(k.Epoch), w(k.Stats), w(k.Seq), w(fair),
				w(prefix(k.ReadyPrefix)), w(prefix(k.PendingPrefix)), w(k.ReadyQueues), w(k.Leases), w(k.Inflight), w(k.Ended), w(prefix(k.EndedIndexPrefix)),
				w(k.Errors), w(k.Dead), w(k.DeadInfo), w(k.Periodic), w(prefix(k.ScheduleHistoryPrefix)), w(k.Marker), w(k.Outbox), w(k.Cancelled), w(imported),
				wr(k.Paused()), wr(k.PausedSchedules()), rd(k.ScheduleDefs()), wr(k.Registered()), wr(k.Record()), wr(k.Procs()), qhist,
			},
			Channels: []string{k.ControlChannel(), k.CancelChannel(), wake, ready, done},
		},
		{
			Component: "worker",
			Does: "pops ready tasks, claims, extends, acks, nacks (retry or dead letter) and releases them; refills fair queues' windows; " +
				"reads pauses and limits set at run time; runs cluster-wide concurrency and rate limits (coord's semaphore and its four rate limiters)",
			Scripts: []string{"claim.lua", "ack.lua", "succeed.lua", "nack.lua", "extend.lua", "release.lua", "popnode.lua", "time.lua", "fairrefill.lua", "queuehist.lua"},
			Commands: []string{"ping", "bitfield", "blmpop", "client|id", "client|getname", "client|setname", "client|unblock", "del", "exists", "get", "set", "time", "pexpire", "pexpireat",
				"hdel", "hexists", "hget", "hgetall", "hincrby", "hmget", "hset", "llen", "lpop", "lpush", "rpush", "incr", "incrby",
				"sadd", "scard", "sismember", "smembers", "srandmember", "srem",
				"zadd", "zcard", "zcount", "zmscore", "zrange", "zrem", "zremrangebyscore", "zscore",
				"publish", "spublish", "subscribe", "ssubscribe", "unsubscribe", "sunsubscribe"},
			Keys: []ACLKey{
				w(prefix(k.ReadyPrefix)), w(prefix(k.PendingPrefix)), w(k.Tasks), w(k.Leases), w(k.Inflight), w(k.Delayed), w(fair),
				w(k.Errors), w(k.Dead), w(k.DeadInfo), w(k.Counts), w(k.Seq), w(k.Queues), w(k.Ended), w(prefix(k.EndedIndexPrefix)),
				rd(k.Paused()), rd(k.Record()), wr(k.Procs()), qhist,
				wr(flow + ":sem"), wr("rate:" + flow + ":tb"), wr(flow + ":sw"), wr(flow + ":fw"), wr(flow + ":lb"),
			},
			Channels: []string{k.ControlChannel(), k.CancelChannel(), wake, ready, flow + ":sem:wake", done},
		},
		{
			Component: "producer",
			Does:      "the Go client or a producer in another language: enqueue (batches too, unique ids too), cancel, change (reschedule, replace), debounce and throttle, lookup, exists, results and waiting for them; WAIT in the durability mode",
			Scripts:   []string{"enqueue.lua", "unique.lua", "cancel.lua", "change.lua", "debounce.lua", "lookup.lua", "queuehist.lua"},
			Commands: []string{"bitfield", "exists", "get", "set", "time", "incr", "pexpireat", "wait",
				"hdel", "hexists", "hget", "hgetall", "hincrby", "hmget", "hset", "hsetnx", "lindex", "lpos", "lrem", "lset", "rpush",
				"zadd", "zcard", "zcount", "zrange", "zrem", "zscore", "publish", "spublish", "subscribe", "unsubscribe"},
			Keys: []ACLKey{
				w(k.Delayed), w(k.Tasks), w(k.Far), w(far), w(k.Counts), w(prefix(k.ReadyPrefix)), w(prefix(k.PendingPrefix)),
				w(k.Errors), w(k.Dead), w(k.DeadInfo), w(k.Outbox), w(k.Cancelled), w(k.Queues), w(k.Inflight), w(k.Marker),
				w(prefix(window)), w(prefix(reservation)), w(k.Leases), w(k.Ended), w(prefix(k.EndedIndexPrefix)), w(fair), rd(k.Record()), wr(k.WaitMark()), qhist,
			},
			Channels: []string{wake, k.CancelChannel(), done},
		},
		{
			Component: "admin",
			Does: "the hourglass CLI and the inspect API: depths, listings, lookup, cancel and change, dead-letter replay and purge, " +
				"pause and resume of queues and schedules, the queue and schedule registries, the shard layout and its resize, " +
				"fair queues' key weights (and the refill of their windows that follows)",
			Scripts: []string{"depth.lua", "registry.lua", "pause.lua", "page.lua", "pagefar.lua", "pageready.lua", "deadops.lua",
				"cancel.lua", "change.lua", "lookup.lua", "layout.lua", "fairrefill.lua", "queuehist.lua"},
			Commands: []string{"bitfield", "client|list", "del", "exists", "get", "getrange", "pexpireat", "set", "time", "incrby",
				"hdel", "hexists", "hget", "hgetall", "hincrby", "hmget", "hset", "hsetnx",
				"lindex", "llen", "lpop", "lpos", "lpush", "lrange", "lrem", "lset", "rpush", "pexpire",
				"sadd", "scard", "sismember", "smembers", "srandmember", "srem",
				"zadd", "zcard", "zcount", "zmscore", "zrange", "zrank", "zrem", "zremrangebyscore", "zrevrange", "zrevrank", "zscore",
				"publish", "spublish"},
			Keys: []ACLKey{
				w(k.Delayed), w(k.Tasks), w(k.Counts), w(k.Queues), w(k.Dead), w(k.DeadInfo), w(k.Errors),
				w(prefix(k.ReadyPrefix)), w(prefix(k.PendingPrefix)), w(k.Outbox), w(k.Cancelled), w(k.Marker),
				w(k.Far), w(k.Inflight), w(k.Leases), w(k.Ended), w(prefix(k.EndedIndexPrefix)), r(far), r(k.Epoch), r(k.Periodic), r(prefix(k.ScheduleHistoryPrefix)), w(fair), w(k.Seq),
				wr(k.Paused()), wr(k.PausedSchedules()), wr(k.ScheduleDefs()), wr(k.Record()), wr(k.Procs()), qhist,
			},
			// ready: a fair queue's refill after a change of a key's
			// weight or cap announces the window it fills.
			Channels: []string{k.ControlChannel(), k.CancelChannel(), wake, ready, done},
		},
	}
	for i := range users {
		users[i].Commands = append(slices.Clone(aclCommands), users[i].Commands...)
	}
	return users
}
