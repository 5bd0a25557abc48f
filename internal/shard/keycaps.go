package shard

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/errtext"
)

// Per-key concurrency caps of a fair queue (docs/fairness.md, "Limits per
// key"). A key holds a permit for each of its tasks from the moment the
// task enters the window until it is settled (lib.lua's fair_room): a key
// at its cap is held off the ring with its tasks waiting, unclaimed, so
// that no worker takes a task its key may not run. A settle (the worker
// then calls FairRefill with the task's key), a change of the cap
// (SetKeyConcurrency) and the recovery pass put a held key back when a
// permit is free. The queue's default (QueuePolicy.KeyConcurrency) is the
// queues hash's field "|kcap|<q>"; a key's own cap is a field of
// Keys.FairCaps in every shard, and "|kcapo|<q>" says some key has one.

// MaxKeyConcurrency is the largest concurrency cap of a key.
const MaxKeyConcurrency = 10000

// keyCapField is the field of the queues hash that holds a fair queue's
// default cap per key.
func keyCapField(queue string) string { return "|kcap|" + queue }

// keyCapsOwnField is the field of the queues hash that says some key of
// the queue has a cap of its own (set by SetKeyConcurrency, never
// removed): workers then tell each settle of the queue's tasks.
func keyCapsOwnField(queue string) string { return "|kcapo|" + queue }

// KeyCapped reads which of queues may have a key at a concurrency cap (a
// default cap registered, or a key with one of its own), as shard 0
// holds it (one HMGET): workers of those refill the key's window after
// each settle.
func (s *Store) KeyCapped(ctx context.Context, queues []string) (map[string]bool, error) {
	fields := make([]string, 0, 2*len(queues))
	for _, q := range queues {
		fields = append(fields, keyCapField(q), keyCapsOwnField(q))
	}
	if len(fields) == 0 {
		return map[string]bool{}, nil
	}
	v, err := s.rdb.HMGet(ctx, s.k.Queues(0), fields...).Result()
	if err != nil {
		return nil, errtext.Errorf("read which queues cap their keys: %w", err)
	}
	out := make(map[string]bool, len(queues))
	for i, q := range queues {
		out[q] = v[2*i] != nil || v[2*i+1] != nil
	}
	return out, nil
}

// SetKeyConcurrency sets the concurrency cap of key in fair queue: at
// most n of its tasks hold a permit at once (in the window, popped or
// running) in the key's shard; n 0 lifts the queue's default cap for the
// key, n -1 removes the key's own cap (the default applies again). It is
// written in every shard, announced to workers (QueuesChanged), and every
// shard's window is then refilled with the key put back on its ring if it
// was held, so that a raised cap takes effect at once.
func (s *Store) SetKeyConcurrency(ctx context.Context, queue, key string, n int) error {
	if n < -1 || n > MaxKeyConcurrency {
		return fmt.Errorf("%w: concurrency %d not in -1..%d", ErrInvalidArgument, n, MaxKeyConcurrency)
	}
	return s.setKeyField(ctx, queue, key, keyField{hash: s.k.FairCaps, val: n, del: n < 0, own: true, what: "concurrency"})
}

// KeyHint is what FairRefill takes to name key without giving back a
// permit: "{key}" ("{}" for the tasks without a key).
func KeyHint(key string) string { return "{" + key + "}" }

// KeyConcurrency returns fair queue's default cap per key (0: none) and
// the keys that have a cap of their own, as shard 0 holds them.
func (s *Store) KeyConcurrency(ctx context.Context, queue string) (def int, own map[string]int, err error) {
	d, m, err := s.keyLimits(ctx, keyCapField(queue), s.k.FairCaps(0, queue), "caps", queue)
	if err != nil {
		return 0, nil, err
	}
	def, _ = strconv.Atoi(d)
	own = make(map[string]int, len(m))
	for k, v := range m {
		if c, err := strconv.Atoi(v); err == nil {
			own[k] = c
		}
	}
	return def, own, nil
}

// keyLimits reads, as shard 0 holds them, the queues hash's field of a
// fair queue's default limit per key ("" when none) and the hash of its
// keys' own (key -> value).
func (s *Store) keyLimits(ctx context.Context, field, hash, what, queue string) (string, map[string]string, error) {
	pipe := s.rdb.Pipeline()
	d := pipe.HGet(ctx, s.k.Queues(0), field)
	m := pipe.HGetAll(ctx, hash)
	_, _ = pipe.Exec(ctx) // each command's error is read below
	err := m.Err()
	if derr := d.Err(); err == nil && derr != redis.Nil {
		err = derr
	}
	if err != nil {
		return "", nil, errtext.Errorf("read the key %s of queue %q: %w", what, queue, err)
	}
	return d.Val(), m.Val(), nil
}

// KeyCapDefaults reads the default cap per key of each of queues that has
// one registered (QueuePolicy.KeyConcurrency), as shard 0 holds it.
func (s *Store) KeyCapDefaults(ctx context.Context, queues []string) (map[string]int, error) {
	return s.queueCounts(ctx, queues, keyCapField, "caps per key")
}

// KeyRate is a rate per key of a fair queue: at most Rate of a key's
// tasks enter the window per Period, by the limiter Kind names, kept in
// the key's shard. A key out of tokens is held like a key at its cap,
// and the shard's mover puts it back when its next token comes
// (Keys.FairWake). The zero KeyRate is no rate.
type KeyRate struct {
	Rate   int
	Period time.Duration
	// Burst is how many enter at once after a quiet time (token bucket;
	// 0 means 1); a leaky bucket and the windows take 0 or 1.
	Burst int
	// Kind is one of LimiterKinds ("" is LimiterTokenBucket): the token
	// bucket (GCRA: Rate per Period on average, Burst at once), the
	// leaky bucket (evenly spaced, one each Period/Rate), the fixed
	// window (at most Rate in each Period, aligned on the epoch) or the
	// sliding window (at most Rate in any Period, a log of the key's
	// admissions).
	Kind string
}

// Bounds of a KeyRate. The interval between two tokens is kept in whole
// µs: at least MinKeyRateInterval, so that its rounding costs at most 5%.
const (
	MaxKeyRate         = 1000000
	MaxKeyRateBurst    = 100000
	MinKeyRateInterval = 10 * time.Microsecond
	// MaxKeyRatePerSecond is the most a rate of the default period (1s)
	// may be: a token each MinKeyRateInterval.
	MaxKeyRatePerSecond = int(time.Second / MinKeyRateInterval)
)

// Validate reports a KeyRate the scripts cannot use.
func (r KeyRate) Validate() error {
	if r == (KeyRate{}) {
		return nil
	}
	if r.Rate < 1 || r.Rate > MaxKeyRate || r.Period < time.Millisecond || r.Period%time.Millisecond != 0 ||
		r.Burst < 0 || r.Burst > MaxKeyRateBurst || r.Period/time.Duration(r.Rate) < MinKeyRateInterval {
		return fmt.Errorf("%w: rate per key %d per %s, burst %d: want 1..%d per a whole number of ms, at least %s apart, burst 0..%d",
			ErrInvalidArgument, r.Rate, r.Period, r.Burst, MaxKeyRate, MinKeyRateInterval, MaxKeyRateBurst)
	}
	if field, why := LimiterProblem(r.Kind, r.Rate, r.Period, r.Burst); field != "" {
		return fmt.Errorf("%w: rate per key: %s: %s", ErrInvalidArgument, strings.ToLower(field), why)
	}
	if r.Kind == LimiterLeakyBucket && r.Burst > 1 {
		return fmt.Errorf("%w: rate per key: burst %d: a key's leaky bucket spaces its tasks evenly (0 or 1)", ErrInvalidArgument, r.Burst)
	}
	return nil
}

// kindLetters are the kinds' letters in a spec (lib.lua's fair_rate).
var kindLetters = map[string]string{LimiterSlidingWindow: "s", LimiterFixedWindow: "f", LimiterLeakyBucket: "l"}

// spec is r as the scripts read it: "rate|period_ms|burst" (burst at
// least 1) for a token bucket, followed by "|<letter>" for another kind
// (kindLetters), or "0" for none.
func (r KeyRate) spec() string {
	if r.Rate <= 0 {
		return "0"
	}
	s := fmt.Sprintf("%d|%d|%d", r.Rate, r.Period.Milliseconds(), max(r.Burst, 1))
	if l := kindLetters[r.Kind]; l != "" {
		s += "|" + l
	}
	return s
}

// parseKeyRate reads a spec; "0" or a bad one is no rate.
func parseKeyRate(v string) KeyRate {
	parts := strings.Split(v, "|")
	if len(parts) != 3 && len(parts) != 4 {
		return KeyRate{}
	}
	rate, err1 := strconv.Atoi(parts[0])
	ms, err2 := strconv.ParseInt(parts[1], 10, 64)
	burst, err3 := strconv.Atoi(parts[2])
	if err1 != nil || err2 != nil || err3 != nil || rate <= 0 {
		return KeyRate{}
	}
	r := KeyRate{Rate: rate, Period: time.Duration(ms) * time.Millisecond, Burst: burst}
	if len(parts) == 4 {
		for kind, l := range kindLetters {
			if l == parts[3] {
				r.Kind = kind
			}
		}
		if r.Kind == "" {
			return KeyRate{}
		}
	}
	return r
}

// keyRateField is the field of the queues hash that holds a fair queue's
// default rate per key.
func keyRateField(queue string) string { return "|krate|" + queue }

// keyRatesOwnField is the field of the queues hash that says some key of
// the queue has a rate of its own (set by SetKeyRate, never removed).
func keyRatesOwnField(queue string) string { return "|krateo|" + queue }

// SetKeyRate gives key of fair queue a rate of its own (r.Rate 0: none,
// lifting the queue's default for the key), or with clear drops it (the
// default applies again). It is written in every shard, with the key's
// token bucket emptied of what the old rate left (so that a raised rate
// takes effect at once), and every shard's window is then refilled with
// the key named.
func (s *Store) SetKeyRate(ctx context.Context, queue, key string, r KeyRate, clear bool) error {
	if err := r.Validate(); err != nil {
		return err
	}
	return s.setKeyField(ctx, queue, key, keyField{hash: s.k.FairRates, val: r.spec(), del: clear, own: true,
		ownField: keyRatesOwnField(queue), reset: s.k.FairBuckets, what: "rate"})
}

// KeyRates returns fair queue's default rate per key and the keys that
// have a rate of their own, as shard 0 holds them.
func (s *Store) KeyRates(ctx context.Context, queue string) (def KeyRate, own map[string]KeyRate, err error) {
	d, m, err := s.keyLimits(ctx, keyRateField(queue), s.k.FairRates(0, queue), "rates", queue)
	if err != nil {
		return KeyRate{}, nil, err
	}
	own = make(map[string]KeyRate, len(m))
	for k, v := range m {
		own[k] = parseKeyRate(v)
	}
	return parseKeyRate(d), own, nil
}
