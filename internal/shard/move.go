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
	v, err := moveScript.Run(ctx, s.rdb,
		[]string{s.k.Delayed(sh), s.k.Tasks(sh), s.k.Epoch(sh), s.k.Dead(sh), s.k.DeadInfo(sh), s.k.Stats(sh), s.k.Seq(sh), s.k.ReadyQueues(sh), s.k.Far(sh), s.k.Counts(sh), s.k.Queues(sh)},
		epoch, limit, s.k.ReadyPrefix(sh), s.k.PendingPrefix(sh), prefetch.Milliseconds()).Int64Slice()
	if err != nil {
		return MoveResult{}, errtext.Errorf("move shard %d: %w", sh, err)
	}
	if len(v) >= 2 && v[0] == -1 {
		return MoveResult{}, fmt.Errorf("%w: shard %d: epoch %d, current %d", ErrStaleEpoch, sh, epoch, v[1])
	}
	if len(v) < 6 {
		return MoveResult{}, errtext.Errorf("move shard %d: unexpected reply %v", sh, v)
	}
	return MoveResult{Moved: int(v[1]), NextDue: v[2], Now: v[3] / 1000, NowMicros: v[3], Buried: int(v[4]), Promoted: int(v[5]), Late: v[6:]}, nil
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
