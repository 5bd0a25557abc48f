package shard

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/errtext"
)

// Fair queues (docs/fairness.md): a queue whose policy has a fair window
// (QueuePolicy.FairWindow) takes its due tasks in turns between their
// keys instead of in due order. A task's key is the hash tag its id
// starts with: "{tenant-42}order-17" has the key "tenant-42"; an id
// without one has the key "". The mover puts a due task of a fair queue in
// its key's list (Keys.FairList) and the key on the queue's ring
// (Keys.FairRing); the ready list workers pop is a window of at most
// FairWindow entries per shard, refilled from the keys in weighted
// round-robin turns by the mover, by the worker after each pop (FairRefill)
// and by the recovery pass.

// Fair queue bounds.
const (
	// DefaultFairWindow is the window of a fair queue unless configured:
	// the most entries its ready list holds per shard. recover.lua holds
	// the same number for a queue no longer fair.
	DefaultFairWindow = 32
	// MaxFairWindow is the largest window.
	MaxFairWindow = 4096
	// MaxKeyWeight is the largest weight of a key (turns per round).
	MaxKeyWeight = 1000
	// MaxKeyLen is the longest key: with its braces it leaves room in
	// the id (MaxIDLen) for the caller's part.
	MaxKeyLen = 128
)

// KeyRule describes the legal keys, for error messages.
const KeyRule = "1..128 bytes of UTF-8 without '{', '}', '|' and control characters"

// ValidKey reports whether key may be a task's key (KeyRule).
func ValidKey(key string) bool {
	return key != "" && len(key) <= MaxKeyLen && utf8.ValidString(key) &&
		!strings.ContainsAny(key, "{}|") && !strings.ContainsFunc(key, unicode.IsControl)
}

// KeyedID returns the id of a task with key and the caller's id rest:
// "{key}rest". It fails with ErrInvalidArgument for a key that is not
// ValidKey or an id that is not ValidID.
func KeyedID(key, rest string) (string, error) {
	if !ValidKey(key) {
		return "", fmt.Errorf("%w: key %q: want %s", ErrInvalidArgument, key, KeyRule)
	}
	id := "{" + key + "}" + rest
	if !ValidID(id) {
		return "", fmt.Errorf("%w: id %q with key %q: want %s", ErrInvalidArgument, rest, key, IDRule)
	}
	return id, nil
}

// KeyOf returns the key of a task id, as the scripts read it (lib.lua's
// fair_key): the hash tag the id starts with, "" if none.
func KeyOf(id string) string {
	if !strings.HasPrefix(id, "{") {
		return ""
	}
	end := strings.IndexByte(id[1:], '}')
	if end < 1 {
		return ""
	}
	return id[1 : 1+end]
}

// anyFairField is the field of the queues hash that says some queue of
// the namespace is fair.
const anyFairField = "|fair"

// fairField is the field of the queues hash that holds a fair queue's
// window.
func fairField(queue string) string { return "|fair|" + queue }

// FairWindows reads the window of each of queues that is fair, as
// registered in shard 0 (one HMGET); a queue that is not fair is absent.
func (s *Store) FairWindows(ctx context.Context, queues []string) (map[string]int, error) {
	return s.queueCounts(ctx, queues, fairField, "fair windows")
}

// FairRefill tops the window of fair queue in shard sh up from its keys'
// lists (fairrefill.lua) and returns how many entries it added. Workers
// call it after they pop entries of a fair queue, and after they settle
// a task of a queue whose keys are capped (KeyCapped), with the task's id
// in settled: its permit is given back, and a key held at its cap with a
// permit free goes back on the ring first. A KeyHint names a key without
// giving a permit back.
func (s *Store) FairRefill(ctx context.Context, sh int, queue string, settled ...string) (int, error) {
	args := make([]any, 1, 1+len(settled))
	args[0] = DefaultFairWindow
	for _, k := range settled {
		args = append(args, k)
	}
	n, err := fairRefillScript.Run(ctx, s.rdb, []string{
		s.k.FairRing(sh, queue), s.k.Seq(sh), s.k.Pending(sh, queue), s.k.Ready(sh, queue),
		s.k.Queues(sh), s.k.FairWeights(sh, queue), s.k.FairTurn(sh, queue), s.k.FairParked(sh, queue),
		s.k.FairCaps(sh, queue), s.k.FairHeld(sh, queue),
	}, args...).Int()
	if err != nil {
		return 0, errtext.Errorf("refill the window of fair queue %q in shard %d: %w", queue, sh, err)
	}
	return n, nil
}

// SetKeyWeight sets the weight of key in fair queue: the turns it takes
// per round of its queue's ring, 0..MaxKeyWeight; weight 1 (the default)
// removes the key's own, weight 0 pauses the key (its tasks wait in its
// lists, its turns go to the other keys). It is written in every shard,
// and each shard's window is then refilled (FairRefill), so that a key
// resumed while its queue's windows are empty runs at once.
func (s *Store) SetKeyWeight(ctx context.Context, queue, key string, weight int) error {
	if weight < 0 || weight > MaxKeyWeight {
		return fmt.Errorf("%w: weight %d not in 0..%d", ErrInvalidArgument, weight, MaxKeyWeight)
	}
	return s.setKeyField(ctx, queue, key, keyField{hash: s.k.FairWeights, val: weight, del: weight == 1, what: "weight"})
}

// keyField is one key's field of a fair queue's per-key hash (weights,
// caps, rates; hash names it in each shard): val, or removed when del.
// own marks a limit, which workers then hear of (they refill after each
// settle of the queue's tasks).
type keyField struct {
	hash     func(sh int, queue string) string
	val      any
	del, own bool
	// ownField, when not "", replaces keyCapsOwnField as the queues
	// hash's field that says some key has a limit of its own.
	ownField string
	// reset, when set, names the keys of the key's state to delete in each
	// shard (a token bucket, so that a new rate applies at once).
	reset func(sh int, queue, key string) []string
	what  string
}

// setKeyField writes f for key of fair queue in every shard, then
// refills every shard's window naming the key (FairRefill with its
// KeyHint: a held key whose limit was raised goes back on the ring), so
// that the change takes effect at once.
func (s *Store) setKeyField(ctx context.Context, queue, key string, f keyField) error {
	if !ValidQueue(queue) {
		return fmt.Errorf("%w: queue name %q", ErrInvalidArgument, queue)
	}
	if key != "" && !ValidKey(key) {
		return fmt.Errorf("%w: key %q: want %s", ErrInvalidArgument, key, KeyRule)
	}
	pipe := s.rdb.Pipeline()
	for sh := range s.Layout().Existing() {
		if f.del {
			pipe.HDel(ctx, f.hash(sh, queue), key)
		} else {
			pipe.HSet(ctx, f.hash(sh, queue), key, f.val)
		}
		if f.own {
			pipe.HSet(ctx, s.k.Queues(sh), cmp.Or(f.ownField, keyCapsOwnField(queue)), 1)
		}
		if f.reset != nil {
			pipe.Del(ctx, f.reset(sh, queue, key)...)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return errtext.Errorf("set the %s of key %q of queue %q: %w", f.what, key, queue, err)
	}
	if f.own && f.ownField == "" {
		_ = s.rdb.Publish(ctx, s.k.ControlChannel(), QueuesChanged).Err() // workers: KeyCapped
	}
	for sh := range s.Layout().Existing() {
		if _, err := s.FairRefill(ctx, sh, queue, KeyHint(key)); err != nil {
			return err
		}
	}
	return nil
}

// KeyWeights returns the keys of fair queue that have a weight of their
// own (other than 1), as shard 0 holds them.
func (s *Store) KeyWeights(ctx context.Context, queue string) (map[string]int, error) {
	m, err := s.rdb.HGetAll(ctx, s.k.FairWeights(0, queue)).Result()
	if err != nil {
		return nil, errtext.Errorf("read the key weights of queue %q: %w", queue, err)
	}
	out := make(map[string]int, len(m))
	for k, v := range m {
		if n, err := strconv.Atoi(v); err == nil {
			out[k] = n
		}
	}
	return out, nil
}

// fairKeys returns the keys of fair queue's state in shard sh: its ring,
// each listed key's list, its weights and its turn (for DropShard).
func (s *Store) fairKeys(ctx context.Context, sh int, queue string) ([]string, error) {
	ring := s.k.FairRing(sh, queue)
	keys, err := s.rdb.LRange(ctx, ring, 0, -1).Result()
	if err != nil && err != redis.Nil {
		return nil, errtext.Errorf("read the ring of queue %q in shard %d: %w", queue, sh, err)
	}
	out := []string{ring, s.k.FairWeights(sh, queue), s.k.FairTurn(sh, queue), s.k.FairParked(sh, queue),
		s.k.FairCaps(sh, queue), s.k.FairHeld(sh, queue), s.k.FairRates(sh, queue), s.k.FairWake(sh), s.k.FairLevels(sh, queue)}
	held, err := s.rdb.SMembers(ctx, s.k.FairHeld(sh, queue)).Result()
	if err != nil && err != redis.Nil {
		return nil, errtext.Errorf("read the held keys of queue %q in shard %d: %w", queue, sh, err)
	}
	for _, k := range slices.Concat(keys, held) {
		out = append(out, s.k.FairList(sh, queue, k), s.k.FairPermits(sh, queue, k),
			s.k.FairLevelList(sh, queue, k, PriorityHigh), s.k.FairLevelList(sh, queue, k, PriorityLow))
		out = append(out, s.k.FairBuckets(sh, queue, k)...)
	}
	return out, nil
}
