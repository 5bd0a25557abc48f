package shard

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/errtext"
)

// Recent returns the records of queue's most recently ended tasks
// (succeeded and cancelled, kept for the queue's Retention), newest
// first, at most limit, over shards: two pipelined reads per shard (its
// index, then the records). A record deleted between the two is left out.
func (s *Store) Recent(ctx context.Context, shards []int, queue string, limit int) ([]Info, error) {
	if !ValidQueue(queue) || limit <= 0 {
		return nil, nil
	}
	pipe := s.rdb.Pipeline()
	idx := make([]*redis.ZSliceCmd, len(shards))
	for i, sh := range shards {
		idx[i] = pipe.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{Key: s.k.EndedIndex(sh, queue), Start: 0, Stop: limit - 1, Rev: true})
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, errtext.Errorf("recent tasks of %q: %w", queue, err)
	}
	type entry struct {
		sh int
		id string
		at float64
	}
	var all []entry
	for i, c := range idx {
		for _, z := range c.Val() {
			id, _ := z.Member.(string)
			all = append(all, entry{shards[i], id, z.Score})
		}
	}
	slices.SortFunc(all, func(a, b entry) int { return cmp.Or(cmp.Compare(b.at, a.at), strings.Compare(a.id, b.id)) })
	all = all[:min(limit, len(all))]
	recs := make([]*redis.StringCmd, len(all))
	for i, e := range all {
		recs[i] = pipe.HGet(ctx, s.k.Ended(e.sh), e.id)
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, errtext.Errorf("recent tasks of %q: %w", queue, err)
	}
	out := make([]Info, 0, len(all))
	for i, e := range all {
		if in, ok := parseRecord(e.id, e.sh, recs[i].Val()); ok {
			out = append(out, in)
		}
	}
	return out, nil
}

// parseRecord reads a record of an ended task (lua/lib.lua's record_end,
// "state|at_ms|was|queue|result"; a record written before results were
// kept ends after the queue).
func parseRecord(id string, sh int, v string) (Info, bool) {
	f := strings.SplitN(v, "|", 5)
	if len(f) < 4 {
		return Info{}, false
	}
	ms, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return Info{}, false
	}
	in := Info{State: f[0], Shard: sh, Task: Task{ID: id, Queue: f[3]}, At: time.UnixMilli(ms), Ended: true}
	if len(f) == 5 {
		in.Result = []byte(f[4])
	}
	return in, true
}

// Operations are the operations on stored tasks the scripts tally (lua
// lib.lua's tally): field "#<op>" of each shard's counts hash.
var Operations = []string{"reschedule", "replace", "debounce", "unique", "cancel", "result"}

// OperationCounts sums each of Operations over the shards that exist in
// the layout (one pipelined HMGET each): how many calls of it succeeded
// in the deployment since its shards were created. A shard deleted by a
// shrink of the shard count takes its tallies with it.
func (s *Store) OperationCounts(ctx context.Context) (map[string]int64, error) {
	fields := make([]string, len(Operations))
	for i, op := range Operations {
		fields[i] = "#" + op
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, s.Layout().Existing())
	for sh := range cmds {
		cmds[sh] = pipe.HMGet(ctx, s.k.Counts(sh), fields...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, errtext.Errorf("operation counts: %w", err)
	}
	out := make(map[string]int64, len(Operations))
	for _, c := range cmds {
		for i, v := range c.Val() {
			if v, ok := v.(string); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				out[Operations[i]] += n
			}
		}
	}
	return out, nil
}
