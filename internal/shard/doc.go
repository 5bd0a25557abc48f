// Package shard owns Hourglass's data in Redis: the key layout of a
// shard, the task encoding, and the Lua scripts that change them. No other
// package builds a key name or sends a script.
//
// A task's shard is crc32(IEEE, id) mod N. Every key of shard s carries
// the hash tag {namespace:s}, so each script touches exactly one Redis
// Cluster slot. docs/protocol.md describes the layout, the encoding and
// the enqueue protocol for producers written in other languages.
//
// Files by role: keys.go (every key name, pure: names do not depend on
// the shard count), placement.go (Layout: the shard count and where an
// id is placed), locate.go (where an id may live during a change of the
// shard count and the order to visit those places: every operation by id
// goes through it), follow.go (following the layout record), codec.go and errors.go (the
// task encoding, name rules, protocol errors), policy.go (queue policies,
// backoff, the far tier), tasks.go (enqueue, cancel, lookup), move.go
// (the mover and epochs), delivery.go and settle.go (a delivery's life in
// a worker: pop, claim, ack, nack, extend, release), recover.go (the
// owner's recovery pass), layout.go, reshard.go and handover.go (changing
// the shard count: the layout record, moving tasks, handing periodic
// schedules over), scripts.go (the embedded Lua). timing.go holds
// the protocol's timing bounds, which must compose.
package shard
