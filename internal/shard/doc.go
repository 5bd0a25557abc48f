// Package shard owns Hourglass's data in Redis: the key layout of a
// shard, the task encoding, and the Lua scripts that change them. No other
// package builds a key name or sends a script.
//
// A task's shard is crc32(IEEE, id) mod N. Every key of shard s carries
// the hash tag {namespace:s}, so each script touches exactly one Redis
// Cluster slot. docs/protocol.md describes the layout, the encoding and
// the enqueue protocol for producers written in other languages.
package shard
