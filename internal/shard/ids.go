package shard

import (
	"crypto/rand"
	"encoding/base64"
	"hash/crc32"
	randv2 "math/rand/v2"
	"sync"

	"github.com/hourglass-sched/hourglass/internal/errtext"
)

// NewID returns a random task id: 16 characters of URL-safe base64 (12
// random bytes), the form of the ids the client generates.
func NewID() string {
	var b [12]byte
	randomBytes(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func randomBytes(b []byte) {
	if _, err := rand.Read(b); err != nil {
		panic(errtext.Errorf("crypto/rand failed: %w", err)) // never fails on Linux
	}
}

// freshID returns a NewID whose shard under l is sh.
func freshID(l Layout, sh int) string { return idIn(l.Shards(), sh) }

// idIn returns a random id of NewID's form whose shard among n is sh
// (0 <= sh < n). Its first 12 characters are those of 9 random bytes; the
// last 4 start as those of 3 more and are varied until crc32 of the id
// modulo n is sh, the last character fastest. The crc32 of the first 12
// is computed once, and of the next 3 once per 64 tries, so that each of
// the n tries (on average) costs one step of the CRC, about 2 ns.
func idIn(n, sh int) string {
	var b [12]byte
	randomBytes(b[:])
	var s [16]byte
	base64.RawURLEncoding.Encode(s[:], b[:])
	tab := crc32.IEEETable
	// crc32.Update returns the complement of its running state.
	head := ^crc32.Update(0, tab, s[:12])
	mod, want := uint32(n), uint32(sh)
	start := uint32(b[9])<<16 | uint32(b[10])<<8 | uint32(b[11])
	for k := uint32(0); k < 1<<18; k++ {
		v := start>>6 ^ k
		c0, c1, c2 := b64URL[v>>12&63], b64URL[v>>6&63], b64URL[v&63]
		c := head
		c = tab[byte(c)^c0] ^ c>>8
		c = tab[byte(c)^c1] ^ c>>8
		c = tab[byte(c)^c2] ^ c>>8
		for j := range uint32(64) {
			c3 := b64URL[(start+j)&63]
			if ^(tab[byte(c)^c3]^c>>8)%mod == want {
				s[12], s[13], s[14], s[15] = c0, c1, c2, c3
				return string(s[:])
			}
		}
	}
	// Not reached for n <= MaxShards: 2^24 tails cover every residue.
	for {
		if id := NewID(); int(crc32.ChecksumIEEE([]byte(id))%mod) == sh {
			return id
		}
	}
}

// b64URL is the alphabet of base64.RawURLEncoding.
const b64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

// RunLength is how many ids in a row Runs places in one shard.
const RunLength = 64

// MaxRunShards is the largest shard count Runs places ids in runs for:
// choosing an id for a shard costs about 10 ns times the shard count.
// Above it, Runs returns NewID's ids, placed by their hash alone.
const MaxRunShards = 256

// Runs generates the ids of tasks enqueued without one, in runs:
// RunLength ids in a row whose shard is the same, then RunLength in the
// next shard, and so on round the shards from a random first one. Task
// placement is unchanged (crc32 of the id modulo the shard count): only
// the random ids are chosen by their shard.
//
// Why: a producer's tasks of one moment then share one shard, so that at
// every step (enqueue, move, pop, ack) they share one script call, which
// costs Redis about what a call of one task costs; spread by hash over
// 16 shards, a steady stream of a few thousand tasks a second is carried
// by calls of about one task each (docs/performance.md, "What placing
// generated ids in runs bought"). Over any span of RunLength × shards ids
// each shard gets its share, so load stays balanced over time across
// shards, their schedulers and Redis Cluster nodes.
//
// A Runs is safe for concurrent use; its zero value is ready.
type Runs struct {
	mu      sync.Mutex
	started bool
	shard   int
	left    int
}

// NewID returns a random id (NewID's form) whose shard under l is the
// current run's; with one shard, or more than MaxRunShards, NewID's.
func (r *Runs) NewID(l Layout) string {
	n := l.Shards()
	if n < 2 || n > MaxRunShards {
		return NewID()
	}
	return idIn(n, r.next(n))
}

// next returns the shard of the next id among n.
func (r *Runs) next(n int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case !r.started:
		r.started, r.shard, r.left = true, randv2.IntN(n), RunLength
	case r.left == 0 || r.shard >= n:
		r.shard, r.left = (r.shard+1)%n, RunLength
	}
	r.left--
	return r.shard
}
