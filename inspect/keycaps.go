package inspect

import (
	"context"
	"time"

	"github.com/hourglass-sched/hourglass/internal/shard"
)

// MaxKeyConcurrency is the largest concurrency cap of a key of a fair
// queue.
const MaxKeyConcurrency = shard.MaxKeyConcurrency

// KeyCaps are the limits of a fair queue's keys (docs/fairness.md,
// "Limits per key"): concurrency caps and rates.
type KeyCaps struct {
	// Default is the cap of each key without one of its own (the
	// schedulers' queues.<q>.key_concurrency); 0: none.
	Default int `json:"default"`
	// Keys are the keys with a cap of their own (SetKeyConcurrency); 0
	// lifts the default for that key.
	Keys map[string]int `json:"keys"`
	// DefaultRate is the rate of each key without one of its own (the
	// schedulers' queues.<q>.key_rate_limit); nil: none.
	DefaultRate *KeyRate `json:"default_rate,omitempty"`
	// Rates are the keys with a rate of their own (SetKeyRate); a zero
	// Rate lifts the default for that key.
	Rates map[string]KeyRate `json:"rates"`
}

// KeyRate is a rate per key: at most Rate of its tasks enter the queue's
// window per Period, by the limiter Kind names (kept in the key's shard;
// the token is taken before any worker claims the task, as a cap's
// permit is).
type KeyRate struct {
	Rate   int           `json:"rate"`
	Period time.Duration `json:"period"`
	// Burst is how many enter at once after a quiet time (token bucket);
	// 0 or 1 for the other kinds.
	Burst int `json:"burst"`
	// Kind is "token_bucket" ("" means it: Rate per Period on average),
	// "leaky_bucket" (evenly spaced, one each Period/Rate),
	// "fixed_window" (at most Rate in each Period, aligned on the epoch)
	// or "sliding_window" (at most Rate in any Period).
	Kind string `json:"kind,omitempty"`
}

func (r KeyRate) shard() shard.KeyRate {
	return shard.KeyRate{Rate: r.Rate, Period: r.Period, Burst: r.Burst, Kind: r.Kind}
}

func keyRateOf(r shard.KeyRate) KeyRate {
	return KeyRate{Rate: r.Rate, Period: r.Period, Burst: r.Burst, Kind: r.Kind}
}

// SetKeyRate gives key of fair queue name a rate of its own (r.Rate 0:
// none, lifting the queue's default for the key; Period 0 means 1s and
// Burst 0 means 1). It takes effect at once: the key's bucket starts
// full under the new rate. ErrInvalidArgument for a rate out of bounds (1..1000000 per a
// whole number of ms, burst up to 100000) or a bad key; ErrNotFound for
// a queue that is not registered.
func (i *Inspector) SetKeyRate(ctx context.Context, name, key string, r KeyRate) error {
	switch {
	case r.Rate == 0:
		r = KeyRate{} // none: the period and burst mean nothing
	case r.Period == 0:
		r.Period = time.Second
	}
	return i.setKeyRate(ctx, name, key, r.shard(), false)
}

// ClearKeyRate drops key's own rate (SetKeyRate): the queue's default
// applies to it again. Idempotent.
func (i *Inspector) ClearKeyRate(ctx context.Context, name, key string) error {
	return i.setKeyRate(ctx, name, key, shard.KeyRate{}, true)
}

func (i *Inspector) setKeyRate(ctx context.Context, name, key string, r shard.KeyRate, clear bool) error {
	if r.Rate < 0 {
		return errorf(ErrInvalidArgument, "rate %d below 0", r.Rate)
	}
	if err := r.Validate(); err != nil {
		return mapErr(err)
	}
	return i.keyChange(ctx, name, key, func() error { return i.store.SetKeyRate(ctx, name, key, r, clear) })
}

// keyChange checks key and that queue name is registered, then runs set,
// a change of the key's weight or limits.
func (i *Inspector) keyChange(ctx context.Context, name, key string, set func() error) error {
	if key != "" && !shard.ValidKey(key) {
		return errorf(ErrInvalidArgument, "key %q: want %s", key, shard.KeyRule)
	}
	if err := i.mustExist(ctx, name); err != nil {
		return err
	}
	return mapErr(set())
}

// SetKeyConcurrency gives key of fair queue name a concurrency cap of its
// own: at most n of its tasks hold a permit at once across every worker
// (taken when a task enters the queue's window, before any worker claims
// it; released when it is settled or its lease runs out); 0 lifts the
// queue's default cap for the key. It takes effect at once: a key held at
// its old cap gets the permits the new one frees. The cap counts the
// key's tasks in one shard, so it holds across the cluster when the
// deployment places tasks by key (ChangeLayout with PlaceByKey).
// ErrInvalidArgument for a key or cap out of bounds; ErrNotFound for a
// queue that is not registered.
func (i *Inspector) SetKeyConcurrency(ctx context.Context, name, key string, n int) error {
	if n < 0 || n > MaxKeyConcurrency {
		return errorf(ErrInvalidArgument, "concurrency %d not in 0..%d", n, MaxKeyConcurrency)
	}
	return i.setKeyConcurrency(ctx, name, key, n)
}

// ClearKeyConcurrency drops key's own cap (SetKeyConcurrency): the
// queue's default applies to it again. Idempotent.
func (i *Inspector) ClearKeyConcurrency(ctx context.Context, name, key string) error {
	return i.setKeyConcurrency(ctx, name, key, -1)
}

func (i *Inspector) setKeyConcurrency(ctx context.Context, name, key string, n int) error {
	return i.keyChange(ctx, name, key, func() error { return i.store.SetKeyConcurrency(ctx, name, key, n) })
}

// KeyConcurrency returns the limits of fair queue name's keys: their
// concurrency caps and rates.
func (i *Inspector) KeyConcurrency(ctx context.Context, name string) (KeyCaps, error) {
	if !shard.ValidQueue(name) {
		return KeyCaps{}, errorf(ErrInvalidArgument, "queue name %q must match %s", name, shard.QueueRule)
	}
	def, own, err := i.store.KeyConcurrency(ctx, name)
	if err != nil {
		return KeyCaps{}, mapErr(err)
	}
	rdef, rown, err := i.store.KeyRates(ctx, name)
	if err != nil {
		return KeyCaps{}, mapErr(err)
	}
	c := KeyCaps{Default: def, Keys: own, Rates: make(map[string]KeyRate, len(rown))}
	if rdef.Rate > 0 {
		d := keyRateOf(rdef)
		c.DefaultRate = &d
	}
	for k, r := range rown {
		c.Rates[k] = keyRateOf(r)
	}
	return c, nil
}

// MaxKeyRate is the largest rate of a key of a fair queue per period.
const MaxKeyRate = shard.MaxKeyRate
