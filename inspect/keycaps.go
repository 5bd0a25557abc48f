package inspect

import (
	"context"

	"github.com/hourglass-sched/hourglass/internal/shard"
)

// MaxKeyConcurrency is the largest concurrency cap of a key of a fair
// queue.
const MaxKeyConcurrency = shard.MaxKeyConcurrency

// KeyCaps are the concurrency caps of a fair queue's keys
// (docs/fairness.md, "Limits per key").
type KeyCaps struct {
	// Default is the cap of each key without one of its own (the
	// schedulers' queues.<q>.key_concurrency); 0: none.
	Default int `json:"default"`
	// Keys are the keys with a cap of their own (SetKeyConcurrency); 0
	// lifts the default for that key.
	Keys map[string]int `json:"keys"`
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
	if key != "" && !shard.ValidKey(key) {
		return errorf(ErrInvalidArgument, "key %q: want %s", key, shard.KeyRule)
	}
	if err := i.mustExist(ctx, name); err != nil {
		return err
	}
	return mapErr(i.store.SetKeyConcurrency(ctx, name, key, n))
}

// KeyConcurrency returns the concurrency caps of fair queue name's keys.
func (i *Inspector) KeyConcurrency(ctx context.Context, name string) (KeyCaps, error) {
	if !shard.ValidQueue(name) {
		return KeyCaps{}, errorf(ErrInvalidArgument, "queue name %q must match %s", name, shard.QueueRule)
	}
	def, own, err := i.store.KeyConcurrency(ctx, name)
	if err != nil {
		return KeyCaps{}, mapErr(err)
	}
	return KeyCaps{Default: def, Keys: own}, nil
}
