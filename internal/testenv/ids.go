package testenv

import (
	"hash/crc32"
	"strconv"
)

// Placement for tests, computed here as producers in other languages
// compute it (docs/protocol.md): the shard of an id among n shards is the
// CRC-32 (IEEE) of the id modulo n. Tests pick ids with these and check
// them against shard.Layout, rather than asking the layout they test. This
// package does not import internal/shard, so internal/shard's own tests
// can use them too.

// ShardOf returns the shard of id among n shards: crc32 IEEE of id mod n.
func ShardOf(id string, n int) int { return int(crc32.ChecksumIEEE([]byte(id)) % uint32(n)) }

// IDs returns the first count ids "<prefix><i>" (i = 0, 1, ...) that keep
// accepts. keep must accept some: IDs does not give up.
func IDs(prefix string, count int, keep func(id string) bool) []string {
	var out []string
	for i := 0; len(out) < count; i++ {
		if id := prefix + strconv.Itoa(i); keep(id) {
			out = append(out, id)
		}
	}
	return out
}

// MovingIDs returns the first count ids "<prefix><i>" of shard sh among
// from shards whose shard among to shards is another one: the tasks a
// change of the shard count from -> to moves out of sh.
func MovingIDs(from, to, sh int, prefix string, count int) []string {
	return IDs(prefix, count, func(id string) bool {
		return ShardOf(id, from) == sh && ShardOf(id, to) != sh
	})
}
