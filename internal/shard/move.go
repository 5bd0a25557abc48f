package shard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/errtext"
)

// MoveResult is the outcome of one mover call.
type MoveResult struct {
	Moved int // tasks pushed to ready lists
	// Buried counts members sent to the DLQ: without data, undecodable,
	// of a queue the shard has not registered ("unknown queue") or with
	// a corrupt due time.
	Buried  int
	NextDue int64 // due ms of the earliest remaining task, -1 if none
	Now     int64 // Redis server time of the call, unix ms
	// NowMicros is the same time in microseconds.
	NowMicros int64
	Late      []int64 // now - due of every moved task, ms; negative when moved ahead
	// Promoted counts far-tier entries taken into the delayed set; when
	// it is positive the caller should call again at once.
	Promoted int
	// Ahead counts the tasks due from NextDue to NextDue plus the
	// request's Window, both included (0 without a Window or a NextDue):
	// how dense the next batch is.
	Ahead int
	// NextWake is the time (unix ms) a fair queue's key held for its
	// next token gets it, the earliest in the shard, -1 if none: the
	// owner calls then, not ahead by its lead. A MoveResult built by hand
	// must set it (0 is a time long past).
	NextWake int64
}

// Move moves at most limit due tasks of shard sh into their ready lists,
// fenced by epoch. It returns an error wrapping ErrStaleEpoch when a newer
// owner has run a fenced script on the shard.
func (s *Store) Move(ctx context.Context, sh int, epoch int64, limit int) (MoveResult, error) {
	return s.MoveAhead(ctx, sh, epoch, limit, 0)
}

// MoveAhead is Move that also moves tasks due up to prefetch after
// Redis's current time (whole milliseconds; 0 is Move). Workers hold such
// a task until its due time (see worker.Task.Due); the mover calls again
// before the next remaining task is within prefetch of being due.
func (s *Store) MoveAhead(ctx context.Context, sh int, epoch int64, limit int, prefetch time.Duration) (MoveResult, error) {
	return s.MoveShard(ctx, MoveRequest{Shard: sh, Epoch: epoch, Limit: limit, Prefetch: prefetch})
}

// MoveShard is MoveAhead for the request r, which may also ask how dense
// the next batch is (r.Window, MoveResult.Ahead).
func (s *Store) MoveShard(ctx context.Context, r MoveRequest) (MoveResult, error) {
	c := s.moveCall(r)
	v, err := moveScript.Run(ctx, s.rdb, c.keys, c.args...).Int64Slice()
	return moveReply(r.Shard, r.Epoch, v, err)
}

// MoveRequest is one shard's move call: MoveAhead's arguments, and
// Window, the span after the next due time whose tasks the reply counts
// (MoveResult.Ahead; 0 counts none).
type MoveRequest struct {
	Shard    int
	Epoch    int64
	Limit    int
	Prefetch time.Duration
	Window   time.Duration
}

// MoveOutcome is one shard's outcome of a MoveMany call: what MoveAhead
// would have returned for it.
type MoveOutcome struct {
	Result MoveResult
	Err    error
}

// MoveMany runs MoveAhead for several shards in one round trip and
// returns their outcomes in the order of reqs. On a standalone or
// Sentinel-managed Redis, where every shard lives on one server, it is
// one call of movemany.lua, which runs move.lua once per shard: the
// per-call cost of Redis (reading, dispatching and answering a command,
// setting up a script) is paid once for all of them. On a Redis Cluster
// it pipelines one move.lua call per shard (each node gets its shards'
// calls in one write). Each shard's outcome is exactly MoveAhead's: its
// own fence (ErrStaleEpoch), its own LIMIT. An error of the call as a
// whole (the connection failed) is every shard's.
func (s *Store) MoveMany(ctx context.Context, reqs []MoveRequest) []MoveOutcome {
	out := make([]MoveOutcome, len(reqs))
	if len(reqs) == 0 {
		return out
	}
	calls := make([]scriptCall, len(reqs))
	for i, r := range reqs {
		calls[i] = s.moveCall(r)
	}
	if _, cluster := s.rdb.(*redis.ClusterClient); cluster || len(reqs) == 1 {
		cmds, err := moveScript.runPipelined(ctx, s.rdb, calls)
		for i, r := range reqs {
			if err != nil {
				out[i].Err = errtext.Errorf("move shard %d: %w", r.Shard, err)
				continue
			}
			v, err := cmds[i].Int64Slice()
			out[i].Result, out[i].Err = moveReply(r.Shard, r.Epoch, v, err)
		}
		return out
	}
	args := make([]any, 0, 1+17*len(reqs))
	args = append(args, len(reqs))
	for _, c := range calls {
		for _, k := range c.keys {
			args = append(args, k)
		}
		args = append(args, c.args...)
	}
	replies, err := moveManyScript.Run(ctx, s.rdb, calls[0].keys[:1], args...).Slice()
	if err == nil && len(replies) != len(reqs) {
		err = errtext.Errorf("unexpected reply of %d elements for %d shards", len(replies), len(reqs))
	}
	for i, r := range reqs {
		if err != nil {
			out[i].Err = errtext.Errorf("move shard %d: %w", r.Shard, err)
			continue
		}
		v, verr := int64s(replies[i])
		out[i].Result, out[i].Err = moveReply(r.Shard, r.Epoch, v, verr)
	}
	return out
}

// int64s reads one shard's element of movemany.lua's reply: move.lua's
// reply (integers) or its error (an error go-redis parses into a type of
// its own fails the whole reply instead; see movemany.lua).
func int64s(x any) ([]int64, error) {
	switch x := x.(type) {
	case error:
		return nil, x
	case []any:
		v := make([]int64, len(x))
		for j, e := range x {
			n, ok := e.(int64)
			if !ok {
				return nil, errtext.Errorf("unexpected element %v", e)
			}
			v[j] = n
		}
		return v, nil
	}
	return nil, errtext.Errorf("unexpected reply %v", x)
}

// moveCall returns move.lua's keys and arguments for r.
func (s *Store) moveCall(r MoveRequest) scriptCall {
	sh := r.Shard
	return scriptCall{
		keys: []string{s.k.Delayed(sh), s.k.Tasks(sh), s.k.Epoch(sh), s.k.Dead(sh), s.k.DeadInfo(sh), s.k.Stats(sh), s.k.Seq(sh), s.k.ReadyQueues(sh), s.k.Far(sh), s.k.Counts(sh), s.k.Queues(sh)},
		args: []any{r.Epoch, r.Limit, s.k.ReadyPrefix(sh), s.k.PendingPrefix(sh), r.Prefetch.Milliseconds(), r.Window.Milliseconds()},
	}
}

// moveReply reads move.lua's reply v (or its error) for shard sh, called
// with epoch.
func moveReply(sh int, epoch int64, v []int64, err error) (MoveResult, error) {
	if err != nil {
		return MoveResult{}, errtext.Errorf("move shard %d: %w", sh, err)
	}
	if len(v) >= 2 && v[0] == -1 {
		return MoveResult{}, fmt.Errorf("%w: shard %d: epoch %d, current %d", ErrStaleEpoch, sh, epoch, v[1])
	}
	if len(v) < 8 {
		return MoveResult{}, errtext.Errorf("move shard %d: unexpected reply %v", sh, v)
	}
	return MoveResult{Moved: int(v[1]), NextDue: v[2], Now: v[3] / 1000, NowMicros: v[3], Buried: int(v[4]), Promoted: int(v[5]), Ahead: int(v[6]), NextWake: v[7], Late: v[8:]}, nil
}

// DelayedHead returns the lowest score in shard sh's delayed set (the far
// tier's member included), ok false when the set is empty: one ZRANGE,
// read-only and not fenced. After a Move that reported NextDue n, a head
// still scored n means nothing earlier was added since.
func (s *Store) DelayedHead(ctx context.Context, sh int) (score float64, ok bool, err error) {
	zs, err := s.rdb.ZRangeWithScores(ctx, s.k.Delayed(sh), 0, 0).Result()
	if err != nil {
		return 0, false, errtext.Errorf("delayed head of shard %d: %w", sh, err)
	}
	if len(zs) == 0 {
		return 0, false, nil
	}
	return zs[0].Score, true, nil
}

// StaleEpochRejections returns how many fenced calls shard sh rejected.
func (s *Store) StaleEpochRejections(ctx context.Context, sh int) (int64, error) {
	n, err := s.rdb.HGet(ctx, s.k.Stats(sh), "stale_epoch").Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return n, err
}

// StoredEpoch returns the fencing epoch recorded in shard sh (0 if none).
func (s *Store) StoredEpoch(ctx context.Context, sh int) (int64, error) {
	n, err := s.rdb.Get(ctx, s.k.Epoch(sh)).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return n, err
}
