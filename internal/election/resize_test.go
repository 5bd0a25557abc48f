package election

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// Tests of changing the shard count at run time (SetShards).

// resizeTTL is the lease TTL of the resize tests. It is long so that the
// reconcile loop's safety tick (every TTL) cannot stand in for the kick
// SetShards sends: each wait after a SetShards (resizeWait, generous for
// a loaded machine, where it takes tens of milliseconds on an idle one)
// ends well before the first tick.
const (
	resizeTTL  = 30 * time.Second
	resizeWait = resizeTTL / 3
)

// checkQuotas waits (up to resizeWait) until each node, in the order
// given (which must be the sorted order of their ids), runs exactly its
// quota of n and its owned-shards gauge says so, and fails the test if
// they do not. etcd may look balanced a moment earlier: a replica that
// joined last holds one shard too few until another releases one.
func checkQuotas(t *testing.T, nodes []*node, n int) {
	t.Helper()
	testenv.WaitFor(t, resizeWait, fmt.Sprintf("every node at its quota of %d", n), func() (bool, string) {
		for i, nd := range nodes {
			if got, want := len(nd.m.Owned()), quota(n, len(nodes), i); got != want {
				return false, fmt.Sprintf("%s owns %d of %d shards, quota %d", nd.id, got, n, want)
			}
			if g := nd.metric(t, "hourglass_shards_owned", ""); int(g) != len(nd.m.Owned()) {
				return false, fmt.Sprintf("%s: owned gauge %v, owns %d", nd.id, g, len(nd.m.Owned()))
			}
		}
		return true, ""
	})
}

func releasedTotal(t *testing.T, nodes []*node) float64 {
	t.Helper()
	var sum float64
	for _, nd := range nodes {
		sum += nd.metric(t, "hourglass_ownership_changes_total", changeReleased)
	}
	return sum
}

func TestSetShardsGrowShrink(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t)
	cli := e.Client(t)
	rec := newRecorder(t)
	opts := nodeOpts{shards: 4, ttl: resizeTTL}
	nodes := []*node{
		startNodeWith(t, e, rec, "a", opts),
		startNodeWith(t, e, rec, "b", opts),
		startNodeWith(t, e, rec, "c", opts),
	}
	waitBalancedN(t, cli, nodes, 4, settle)
	checkQuotas(t, nodes, 4)
	// The owners once every node holds its own quota: balanced counts
	// alone (2/1/1 in any order) came while a replica over its quota was
	// still handing a shard over, which then read as a move caused by
	// the growth.
	at4 := waitBalancedN(t, cli, nodes, 4, settle)

	// Grow 4 -> 8: quotas only grow (2/1/1 -> 3/3/2), so the new shards
	// are taken and no shard moves.
	start := time.Now()
	for _, nd := range nodes {
		nd.m.SetShards(8)
		if got := nd.m.Shards(); got != 8 {
			t.Fatalf("%s: Shards() = %d after SetShards(8)", nd.id, got)
		}
	}
	at8 := waitBalancedN(t, cli, nodes, 8, resizeWait)
	t.Logf("grow 4 -> 8 balanced after %s", time.Since(start))
	checkQuotas(t, nodes, 8)
	for s, ep := range at4 {
		if at8[s] != ep {
			t.Errorf("shard %d: epoch %d after growing, was %d: it moved", s, at8[s], ep)
		}
	}

	// Shrink 8 -> 3: every replica stops and releases its shards >= 3;
	// 0..2 end up owned once each (1/1/1).
	released := releasedTotal(t, nodes)
	start = time.Now()
	for _, nd := range nodes {
		nd.m.SetShards(3)
	}
	waitBalancedN(t, cli, nodes, 3, resizeWait)
	t.Logf("shrink 8 -> 3 balanced after %s", time.Since(start))
	checkQuotas(t, nodes, 3)

	// balanced has checked that etcd holds exactly the keys of 0..2. The
	// RunFuncs of 3..7 ran and have returned; the recorder's RunFunc only
	// returns once its ctx is cancelled.
	rec.mu.Lock()
	for s := 3; s < 8; s++ {
		if len(rec.starts[s]) == 0 {
			t.Errorf("shard %d never ran", s)
		}
		if who, ok := rec.active[s]; ok {
			t.Errorf("shard %d still running on %s after the shrink", s, who)
		}
	}
	if rec.running != 3 {
		t.Errorf("%d RunFuncs running, want 3", rec.running)
	}
	rec.mu.Unlock()
	if got := releasedTotal(t, nodes) - released; got < 5 {
		t.Errorf("released counters grew by %v during the shrink, want >= 5", got)
	}
}

func TestSetShardsBeforeRun(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t)
	cli := e.Client(t)
	rec := newRecorder(t)
	opts := nodeOpts{shards: 2, ttl: resizeTTL, beforeRun: func(t *testing.T, m *Manager) {
		for _, bad := range []int{0, -1, shard.MaxShards + 1} {
			m.SetShards(bad)
			if got := m.Shards(); got != 2 {
				t.Errorf("SetShards(%d) changed Shards() to %d", bad, got)
			}
		}
		for _, good := range []int{shard.MaxShards, 1, 6} {
			m.SetShards(good)
			if got := m.Shards(); got != good {
				t.Errorf("Shards() = %d after SetShards(%d)", got, good)
			}
		}
	}}
	nodes := []*node{startNodeWith(t, e, rec, "a", opts), startNodeWith(t, e, rec, "b", opts)}
	waitBalancedN(t, cli, nodes, 6, resizeWait)
	checkQuotas(t, nodes, 6)
}

// TestSetShardsShrinkReleasesBeyond covers a replica that, after the
// count shrinks, is within its quota by number but holds only shards
// beyond the new count: releasing for balance alone would keep one of
// them, so it must release them for being out of range.
func TestSetShardsShrinkReleasesBeyond(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t)
	cli := e.Client(t)
	rec := newRecorder(t)
	opts := nodeOpts{shards: 8, ttl: resizeTTL}
	a := startNodeWith(t, e, rec, "a", opts)
	waitBalancedN(t, cli, []*node{a}, 8, settle)
	// b joins: a releases its highest-numbered shards, so b gets 4..7.
	b := startNodeWith(t, e, rec, "b", opts)
	nodes := []*node{a, b}
	waitBalancedN(t, cli, nodes, 8, settle)
	if got := slices.Sorted(maps.Keys(b.m.Owned())); !slices.Equal(got, []int{4, 5, 6, 7}) {
		t.Fatalf("b owns %v, the scenario needs 4..7", got)
	}

	// Shrink to 4: quotas 2/2. b's shards are all >= 4 and must all go;
	// it then takes two of 0..3 from a.
	for _, nd := range nodes {
		nd.m.SetShards(4)
	}
	waitBalancedN(t, cli, nodes, 4, resizeWait)
	checkQuotas(t, nodes, 4)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for s := 4; s < 8; s++ {
		if who, ok := rec.active[s]; ok {
			t.Errorf("shard %d still running on %s after the shrink", s, who)
		}
	}
}

// TestSetShardsConcurrent changes the count from several goroutines while
// the managers run (meant for -race), then checks that they settle on the
// last count. The recorder checks throughout that no shard runs twice at
// once and that epochs increase.
func TestSetShardsConcurrent(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t)
	cli := e.Client(t)
	rec := newRecorder(t)
	opts := nodeOpts{shards: 4}
	nodes := []*node{startNodeWith(t, e, rec, "a", opts), startNodeWith(t, e, rec, "b", opts)}
	waitBalancedN(t, cli, nodes, 4, settle)

	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			nd := nodes[g%len(nodes)]
			for range 50 {
				nd.m.SetShards(1 + rand.IntN(8))
				if n := nd.m.Shards(); n < 1 || n > 8 {
					t.Errorf("%s: Shards() = %d", nd.id, n)
				}
				for s := range nd.m.Owned() {
					if s < 0 || s >= 8 {
						t.Errorf("%s owns shard %d", nd.id, s)
					}
				}
				time.Sleep(time.Millisecond) // spread the changes over reconciles
			}
		})
	}
	wg.Wait()
	for _, nd := range nodes {
		nd.m.SetShards(5)
	}
	waitBalancedN(t, cli, nodes, 5, settle)
	checkQuotas(t, nodes, 5)
	if r := rec.runningCount(); r != 5 {
		t.Errorf("%d RunFuncs running, want 5", r)
	}
}
