package shard

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/backoff"
	"github.com/hourglass-sched/hourglass/internal/errtext"
)

// Calls of several shards in one script call. On a standalone or
// Sentinel-managed Redis every shard lives on one server, so a script may
// touch the keys of several shards: the "many" form of a script
// (movemany.lua, ackmany.lua, enqueuemany.lua) runs it once per shard
// within one call (lib.lua's each_call), and Redis pays its per-call
// cost — reading and dispatching a command, setting up a script, the
// round trip's wake-up — once for the batch instead of once per shard.
// At a steady rate spread over many shards that cost is most of what a
// task costs Redis, because each shard's call carries one task.

// oneServer reports whether every shard lives on one Redis server, so
// that one script call may touch the keys of several shards. A Redis
// Cluster routes a call by its declared keys, and a Ring by its first
// key; on either, the shards' keys live on several servers.
func (s *Store) oneServer() bool {
	switch s.rdb.(type) {
	case *redis.ClusterClient, *redis.Ring:
		return false
	}
	return true
}

// manyCall packs calls of one script, each on its own shard's keys, into
// one call of the script's many form: the first call's first key
// (declared, so that the call has one), then as arguments the number of
// calls and, per call, its number of keys, its number of arguments, its
// keys and its arguments.
func manyCall(calls []scriptCall) scriptCall {
	n := 1
	for _, c := range calls {
		n += 2 + len(c.keys) + len(c.args)
	}
	args := make([]any, 0, n)
	args = append(args, len(calls))
	for _, c := range calls {
		args = append(args, len(c.keys), len(c.args))
		for _, k := range c.keys {
			args = append(args, k)
		}
		args = append(args, c.args...)
	}
	return scriptCall{keys: calls[0].keys[:1], args: args}
}

// runEach runs calls of sc, one per shard, in one round trip and returns
// each call's reply and error, in order. On one server two or more calls
// go as one call of many, sc's many form; otherwise each call goes on
// its own, pipelined (runPipelinedOnce when once is set, else
// runPipelined). Either way each call's outcome is its own. A call that
// its shard refused before it ran (TRYAGAIN while the shard count
// changes, see refusedBeforeRun) is sent again, alone or with the others
// refused, as runPipelinedOnce sends such calls again.
func (s *Store) runEach(ctx context.Context, sc, many script, calls []scriptCall, once bool) ([]any, []error) {
	replies, errs := make([]any, len(calls)), make([]error, len(calls))
	if !s.oneServer() || len(calls) < 2 || s.perShard {
		cmds, err := sc.pipelined(ctx, s.rdb, calls, once)
		for i := range calls {
			if err != nil {
				errs[i] = err
				continue
			}
			replies[i], errs[i] = cmds[i].Result()
		}
		return replies, errs
	}
	todo := make([]int, len(calls))
	for i := range todo {
		todo[i] = i
	}
	limit := resends(s.rdb)
	bo := backoff.Backoff{Min: 25 * time.Millisecond, Max: 100 * time.Millisecond}
	for resent := 0; ; resent++ {
		batch := make([]scriptCall, len(todo))
		for k, i := range todo {
			batch[k] = calls[i]
		}
		elems, err := many.runMany(ctx, s.rdb, batch, once)
		var refused []int
		for k, i := range todo {
			if err != nil {
				errs[i] = err
				continue
			}
			replies[i], errs[i] = nil, nil
			switch e := elems[k].(type) {
			case error:
				errs[i] = e
				if refusedBeforeRun(e) {
					refused = append(refused, i)
				}
			default:
				replies[i] = e
			}
		}
		if len(refused) == 0 || resent >= limit || !backoff.Sleep(ctx, bo.Next()) {
			return replies, errs
		}
		todo = refused
	}
}

// runMany runs calls as one call of sc, their many form (manyCall), and
// returns its elements: one per call, each a reply or an error (a
// callError).
func (sc script) runMany(ctx context.Context, rdb redis.Cmdable, calls []scriptCall, once bool) ([]any, error) {
	cmds, err := sc.pipelined(ctx, rdb, []scriptCall{manyCall(calls)}, once)
	if err != nil {
		return nil, err
	}
	elems, err := cmds[0].Slice()
	if err == nil && len(elems) != len(calls) {
		err = errtext.Errorf("%s: unexpected reply of %d elements for %d calls", sc.name, len(elems), len(calls))
	}
	for k, e := range elems {
		if text, ok := e.(string); ok {
			elems[k] = callError(text)
		}
	}
	return elems, err
}

// callError is the error of one call in the reply of a many form, which
// carries it as text (lib.lua's each_call): go-redis fails a whole reply
// that holds an error reply. It is a Redis error as go-redis's
// HasErrorPrefix sees one, so that TRYAGAIN and LAYOUT replies are told
// apart as they are from a call of its own.
type callError string

func (e callError) Error() string { return string(e) }

// RedisError marks callError as a redis.Error.
func (callError) RedisError() {}
