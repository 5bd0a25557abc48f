package shard

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// commandsRun returns how many commands Redis ran (those scripts ran
// included) since the last CONFIG RESETSTAT, leaving out CONFIG and
// INFO, and resets the count.
func commandsRun(t *testing.T, ctx context.Context, rdb *redis.Client) int64 {
	t.Helper()
	var n int64
	for name, c := range testenv.CommandCalls(t, rdb) {
		if !strings.HasPrefix(name, "config") && !strings.HasPrefix(name, "info") {
			n += c
		}
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestIdleRecoveryPassIsCheap: the recovery pass of a shard with nothing
// leased, ready or dead (the one every idle shard runs each idle
// re-check) runs at most 8 commands in Redis, the script call included:
// the lease deadlines' head doubles as the next deadline, an empty
// dead-letter set costs one ZCARD, and due times below 0 are left to the
// mover, which buries them when it looks. It ran 11.
func TestIdleRecoveryPassIsCheap(t *testing.T) {
	t.Parallel()
	s, rdb := newTestStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	args := RecoverArgs{Limit: 10, DeadMaxSize: 100, DeadMaxAge: time.Hour}
	if _, err := s.Recover(ctx, 0, 1, args); err != nil { // loads the script
		t.Fatal(err)
	}
	commandsRun(t, ctx, rdb)
	r, err := s.Recover(ctx, 0, 1, args)
	if err != nil {
		t.Fatal(err)
	}
	if r.NextDeadline != -1 || r.Pending != 0 {
		t.Fatalf("idle shard's pass: %+v", r)
	}
	if n := commandsRun(t, ctx, rdb); n > 8 {
		t.Fatalf("an idle shard's recovery pass ran %d commands in Redis, want at most 8", n)
	}
}
