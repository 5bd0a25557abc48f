package shard

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/errtext"
)

// TaskEncoding says which encoding enqueues write (docs/protocol.md,
// "Task data"). Every reader reads both; a process of a version before
// encoding 2 reads only version 1, so a namespace turns version 2 on once
// every process that reads it runs a version that reads it.
type TaskEncoding int

const (
	// EncodingAuto keeps the namespace's choice: version 2 for a
	// namespace whose first registration was made by a version that
	// writes it, version 1 for one registered before (until set to
	// EncodingCompact).
	EncodingAuto TaskEncoding = iota
	// EncodingText writes version 1, the text header with the queue's
	// name ("1|queue|attempts|..."); data already written in version 2
	// stays readable.
	EncodingText
	// EncodingCompact writes version 2: a 24-byte binary header with the
	// queue's interned number, so that a task's value falls in a smaller
	// allocation class (docs/performance.md, "Memory").
	EncodingCompact
)

// ParseTaskEncoding reads "auto", "1" or "2".
func ParseTaskEncoding(s string) (TaskEncoding, error) {
	switch s {
	case "auto", "":
		return EncodingAuto, nil
	case "1":
		return EncodingText, nil
	case "2":
		return EncodingCompact, nil
	}
	return 0, fmt.Errorf("%w: task encoding %q (want auto, 1 or 2)", ErrInvalidArgument, s)
}

// String returns the form ParseTaskEncoding reads.
func (e TaskEncoding) String() string {
	switch e {
	case EncodingText:
		return "1"
	case EncodingCompact:
		return "2"
	}
	return "auto"
}

// Fields of a shard's queues hash that intern queue names (they start
// with "|", which no queue name holds): "|id|<queue>" the queue's number
// (present while enqueues write version 2), "|q|<number>" its name (kept
// for as long as data may name it), and in shard 0 "|ids", the last
// number given, and "|encoding", the namespace's encoding ("1" or "2").
const (
	queueIDPrefix   = "|id|"
	queueNamePrefix = "|q|"
	encodingField   = "|encoding"
)

// namespaceField reports whether f is a field of shard 0's queues hash
// that speaks for the namespace ("|encoding", "|ids", "|num|<queue>"),
// which other shards do not copy.
func namespaceField(f string) bool {
	return f == encodingField || f == "|ids" || strings.HasPrefix(f, "|num|")
}

// queueNames caches the names of interned queue numbers, read from shard
// 0's queues hash on first use. Numbers are never reused, so an entry
// never goes stale.
type queueNames struct {
	mu sync.RWMutex
	m  map[uint16]string
}

// namesIn returns the QueueNameFunc of data read from shard sh: a cached
// name, else the one shard sh's queues hash holds ("" when none, an
// error when it could not be read). Names are read from the data's own
// shard, whose node served the data, not from another node.
func (s *Store) namesIn(sh int) QueueNameFunc {
	return func(qid uint16) (string, error) {
		s.names.mu.RLock()
		n, ok := s.names.m[qid]
		s.names.mu.RUnlock()
		if ok {
			return n, nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		n, err := s.rdb.HGet(ctx, s.k.Queues(sh), queueNamePrefix+strconv.Itoa(int(qid))).Result()
		if errors.Is(err, redis.Nil) {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		s.names.mu.Lock()
		if s.names.m == nil {
			s.names.m = map[uint16]string{}
		}
		s.names.m[qid] = n // numbers are never given to another queue
		s.names.mu.Unlock()
		return n, nil
	}
}

// DecodeIn parses task data read from shard sh (DecodeWith), reading a
// name missing from the cache from that shard's queues hash.
func (s *Store) DecodeIn(sh int, id string, blob []byte) (Task, error) {
	return DecodeWith(id, blob, s.namesIn(sh))
}

// SetTaskEncoding sets the encoding the store's RegisterQueues asks for
// (EncodingAuto unless set). Set it before the store is used.
func (s *Store) SetTaskEncoding(e TaskEncoding) { s.encoding = e }

// StagingAllowed reports whether movers may stage a dense batch up to
// MaxStage ahead of its due time: the namespace writes encoding version
// 2, as this store's last RegisterQueues found it. A worker older than
// staging holds a popped task only up to 300 ms ahead and would start a
// task staged further ahead early; every process that reads version 2
// holds up to MaxHold, so a namespace on version 2 (new, or switched by
// the operator once every process reads it) has no such worker.
func (s *Store) StagingAllowed() bool { return s.compact.Load() }

// RefreshEncoding reads the namespace's encoding from shard 0 again (one
// HGET), for StagingAllowed: a scheduler calls it when the control
// channel announces a change, such as another scheduler's registration
// that switched the namespace back to version 1. A namespace without a
// recorded encoding reads as version 1.
func (s *Store) RefreshEncoding(ctx context.Context) error {
	v, err := s.rdb.HGet(ctx, s.k.Queues(0), encodingField).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return errtext.Errorf("read the namespace's encoding: %w", err)
	}
	s.compact.Store(v == "2")
	return nil
}

// internQueues settles the namespace's encoding in shard 0 (one call of
// registry.lua's "intern") and, when it is version 2, the numbers of
// queues (new ones get the next free number); it returns the encoding in
// force and the numbers by queue (nil for version 1; "" for a queue
// left on version 1). What the other shards hold goes with the call
// (namesInShards), so that a shard 0 that lost its queues hash gives
// each queue the number its tasks carry elsewhere.
func (s *Store) internQueues(ctx context.Context, queues []string) (TaskEncoding, map[string]string, error) {
	known, hint, err := s.namesInShards(ctx)
	if err != nil {
		return 0, nil, err
	}
	args := []any{"intern", s.encoding.String(), hint, len(known)}
	for _, n := range slices.Sorted(maps.Keys(known)) {
		args = append(args, n, known[n])
	}
	for _, q := range queues {
		args = append(args, q)
	}
	v, err := registryScript.Run(ctx, s.rdb, []string{s.k.Queues(0)}, args...).StringSlice()
	if err != nil {
		return 0, nil, errtext.Errorf("intern queue names: %w", err)
	}
	if len(v) != 1+len(queues) && len(v) != 1 {
		return 0, nil, fmt.Errorf("intern queue names: %d values for %d queues", len(v), len(queues))
	}
	s.compact.Store(v[0] == "2")
	if v[0] != "2" {
		return EncodingText, nil, nil
	}
	ids := make(map[string]string, len(queues))
	for i, q := range queues {
		ids[q] = v[1+i]
	}
	return EncodingCompact, ids, nil
}

// namesInShards reads the interned names every shard holds (fields
// "|q|<number>"), and what the shards say of the encoding: "new" when no
// shard has a queues hash, "2" when one has an interned number in use
// (a field "|id|<queue>"), else "1". Two shards that give one number
// different names are an error: the registry was written by hand.
func (s *Store) namesInShards(ctx context.Context) (map[int]string, string, error) {
	l := s.Layout()
	pipe := s.rdb.Pipeline()
	regs := make([]*redis.MapStringStringCmd, l.Shards())
	for sh := range regs {
		regs[sh] = pipe.HGetAll(ctx, s.k.Queues(sh))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, "", errtext.Errorf("read the queue registry: %w", err)
	}
	known := map[int]string{}
	hint := "new"
	for sh, c := range regs {
		reg := c.Val()
		if len(reg) > 0 && hint == "new" {
			hint = "1"
		}
		for f, v := range reg {
			if strings.HasPrefix(f, queueIDPrefix) {
				hint = "2"
			}
			ns, ok := strings.CutPrefix(f, queueNamePrefix)
			if !ok {
				continue
			}
			n, err := strconv.Atoi(ns)
			if err != nil || n < 1 || n > 65535 || !ValidQueue(v) {
				continue // not ours
			}
			if prev, ok := known[n]; ok && prev != v {
				return nil, "", fmt.Errorf("%w: queue number %d names %q in one shard and %q in shard %d", ErrInvalidArgument, n, prev, v, sh)
			}
			known[n] = v
		}
	}
	return known, hint, nil
}
