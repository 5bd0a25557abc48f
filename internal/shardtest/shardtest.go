// Package shardtest is the shared fixture of the tests that need
// Hourglass's data in a real Redis (the worker, scan, recovery and
// scheduler tests): a shard.Store on a fresh redis-server with queues
// registered, seeders that put tasks into each state (scheduled, ready,
// popped, dead), readers of that state, and owners that run the per-shard
// loops on every shard with real wake-ups, as a scheduler does. Cluster is
// the same layout on a Redis Cluster of three primaries, for the client,
// inspect and worker tests that run there.
//
// Everything fails the test on error and is cleaned up with t.Cleanup.
// Each Env has a Redis of its own, so tests using one may run in parallel.
package shardtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/fanout"
	"github.com/hourglass-sched/hourglass/internal/owner"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// Epoch is the fencing epoch of the owners Own starts and of the moves
// the seeders make.
const Epoch = 1

// Queue is the queue Options registers when it names none.
const Queue = "q"

// Options shape an Env. Zero fields take the defaults given.
type Options struct {
	// Namespace defaults to "test"; Shards to 2.
	Namespace string
	Shards    int
	// Queues are registered with their policies; nil registers Queue
	// with Policy(). A policy's zero MaxPayload becomes 1 KiB.
	Queues map[string]shard.QueuePolicy
	// NoQueues registers none (a scheduler under test registers its own).
	NoQueues bool
}

// Policy is a queue policy for tests: 3 retries, a 30 s timeout, the
// default backoff.
func Policy() shard.QueuePolicy { return shard.QueuePolicy{MaxRetries: 3, Timeout: 30 * time.Second} }

// Env is a Redis with Hourglass's layout, store and queues.
type Env struct {
	T     testing.TB
	Redis *testenv.Redis
	// RDB is a client for the test's own calls.
	RDB   *redis.Client
	Store *shard.Store
}

// New starts a redis-server and registers the queues of o.
func New(t testing.TB, o Options) *Env {
	t.Helper()
	r := testenv.StartRedis(t)
	e := &Env{T: t, Redis: r, RDB: r.Client(t)}
	e.Store = shard.NewStore(e.RDB, o.layout(t))
	o.register(t, e.Store)
	return e
}

// layout returns the layout o names, zero fields taking their defaults.
func (o Options) layout(t testing.TB) shard.Layout {
	t.Helper()
	if o.Namespace == "" {
		o.Namespace = "test"
	}
	if o.Shards == 0 {
		o.Shards = 2
	}
	l, err := shard.NewLayout(o.Namespace, o.Shards)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// register registers o's queues in st.
func (o Options) register(t testing.TB, st *shard.Store) {
	t.Helper()
	if o.NoQueues {
		return
	}
	if o.Queues == nil {
		o.Queues = map[string]shard.QueuePolicy{Queue: Policy()}
	}
	register(t, st, o.Queues)
}

// Register records queue policies (a zero MaxPayload becomes 1 KiB), as
// a scheduler does at start.
func (e *Env) Register(queues map[string]shard.QueuePolicy) {
	e.T.Helper()
	register(e.T, e.Store, queues)
}

// register records queue policies in st, a zero MaxPayload as 1 KiB.
func register(t testing.TB, st *shard.Store, queues map[string]shard.QueuePolicy) {
	t.Helper()
	ps := make(map[string]shard.QueuePolicy, len(queues))
	for q, p := range queues {
		if p.MaxPayload == 0 {
			p.MaxPayload = 1024
		}
		ps[q] = p
	}
	if err := st.RegisterQueues(context.Background(), ps); err != nil {
		t.Fatal(err)
	}
}

// Layout returns the store's key layout.
func (e *Env) Layout() shard.Layout { return e.Store.Layout() }

func (e *Env) ctx() context.Context { return testenv.Ctx(e.T, 30*time.Second) }

// IDsIn returns n task ids that hash to shard sh: prefix0, prefix1, ...
// skipping those of other shards.
func (e *Env) IDsIn(sh, n int, prefix string) []string {
	var ids []string
	for i := 0; len(ids) < n; i++ {
		if id := fmt.Sprintf("%s%d", prefix, i); e.Layout().ShardOf(id) == sh {
			ids = append(ids, id)
		}
	}
	return ids
}

// Schedule enqueues tasks of queue due after delay, with the payload
// "p-<id>" and the queue's retry limit.
func (e *Env) Schedule(queue string, delay time.Duration, ids ...string) {
	e.T.Helper()
	args := make([]shard.EnqueueArgs, len(ids))
	for i, id := range ids {
		args[i] = shard.EnqueueArgs{ID: id, Queue: queue, Delay: delay, MaxRetries: -1, Payload: []byte("p-" + id)}
	}
	for i, r := range e.Store.EnqueueBatch(e.ctx(), args) {
		if r.Err != nil {
			e.T.Fatalf("shardtest: enqueue %s: %v", ids[i], r.Err)
		}
	}
}

// Ready enqueues tasks due now and moves them into their ready lists
// (with Epoch, as an owner started by Own does).
func (e *Env) Ready(queue string, ids ...string) {
	e.T.Helper()
	e.Schedule(queue, 0, ids...)
	e.moveAll(0)
	for _, id := range ids {
		if s := e.State(id); s != "ready" {
			e.T.Fatalf("shardtest: %s is %s after the move, want ready", id, s)
		}
	}
}

// MoveAhead moves every task due within ahead into its ready list, as a
// scheduler with scheduler.prefetch does, and returns how many it moved.
func (e *Env) MoveAhead(ahead time.Duration) int { return e.moveAll(ahead) }

func (e *Env) moveAll(ahead time.Duration) int {
	e.T.Helper()
	moved := 0
	for sh := range e.Layout().Shards() {
		for {
			res, err := e.Store.MoveAhead(e.ctx(), sh, Epoch, 1000, ahead)
			if err != nil {
				e.T.Fatalf("shardtest: move shard %d: %v", sh, err)
			}
			moved += res.Moved
			if res.Moved+res.Buried < 1000 && res.Promoted == 0 {
				break
			}
		}
	}
	return moved
}

// Popped makes n tasks of queue ready (ids prefix0..) and pops them as a
// worker does, returning each as a delivery run before its lease: it
// must be settled or claimed within shard.UnleasedGrace, or recovery
// takes it back. The queue must have nothing else ready.
func (e *Env) Popped(queue, prefix string, n int) []shard.Delivery {
	e.T.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	e.Ready(queue, ids...)
	var out []shard.Delivery
	keys := e.Layout().ReadyKeys([]string{queue})
	for len(out) < n {
		key, entries, err := e.Store.Pop(e.ctx(), keys, n-len(out), time.Second)
		if err != nil || len(entries) == 0 {
			e.T.Fatalf("shardtest: popped %d of %d ready tasks: %v", len(out), n, err)
		}
		sh, _, _ := e.Layout().ParseReady(key)
		for _, entry := range entries {
			d, ok := e.Store.Popped(sh, entry, time.Now(), 0)
			if !ok {
				e.T.Fatalf("shardtest: unusable ready entry %q", entry)
			}
			out = append(out, d)
		}
	}
	return out
}

// Dead makes n tasks of queue (ids prefix0..) dead letters: popped and
// failed without retry with the error "shardtest: dead". The queue must
// have nothing else ready.
func (e *Env) Dead(queue, prefix string, n int) []string {
	e.T.Helper()
	ids := make([]string, 0, n)
	for _, d := range e.Popped(queue, prefix, n) {
		a := d.NackArgs(true, "shardtest: dead")
		a.Dead = true
		if res, err := e.Store.Nack(e.ctx(), a); err != nil || !res.Dead {
			e.T.Fatalf("shardtest: bury %s: %+v %v", d.Task.ID, res, err)
		}
		ids = append(ids, d.Task.ID)
	}
	return ids
}

// Lookup returns a task's state as the store reports it.
func (e *Env) Lookup(id string) (shard.Info, error) { return e.Store.Lookup(e.ctx(), id) }

// State returns a task's state (scheduled, ready, active, dead), or
// "gone" for a task that is not stored.
func (e *Env) State(id string) string {
	info, err := e.Lookup(id)
	switch {
	case errors.Is(err, shard.ErrNotFound):
		return "gone"
	case err != nil:
		return "error: " + err.Error()
	}
	return info.State
}

// Gone fails the test unless every id is no longer stored (acked or
// cancelled).
func (e *Env) Gone(ids ...string) {
	e.T.Helper()
	for _, id := range ids {
		if s := e.State(id); s != "gone" {
			e.T.Fatalf("shardtest: %s is %s, want it gone", id, s)
		}
	}
}

// ReadyLen returns the length of shard sh's ready list of queue.
func (e *Env) ReadyLen(sh int, queue string) int64 {
	return e.RDB.LLen(context.Background(), e.Layout().Ready(sh, queue)).Val()
}

// Own runs loops as the owner of every shard, with Epoch and with the
// shard's wake-ups on a sharded pub/sub hub, until the test ends, as a
// scheduler replica that owns them all does. It returns the shards as the
// loops see them (a test may signal Ready itself).
func (e *Env) Own(loops ...owner.Loop) []owner.Shard {
	ctx, cancel := context.WithCancel(context.Background())
	hub := fanout.New(e.RDB, fanout.Sharded, nil)
	shards := make([]owner.Shard, e.Layout().Shards())
	var wg sync.WaitGroup
	for sh := range shards {
		wake, unsubscribe := hub.Signal(ctx, e.Layout().WakeChannel(sh), nil)
		shards[sh] = owner.Shard{ID: sh, Epoch: Epoch, Wake: wake, Ready: make(chan struct{}, 1)}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer unsubscribe()
			_ = owner.Run(ctx, shards[sh], loops)
		}()
	}
	e.T.Cleanup(func() {
		cancel()
		wg.Wait()
		hub.Close()
	})
	return shards
}
