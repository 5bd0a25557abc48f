package testenv

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startCluster starts the 3-primary, 1-replica-each cluster the tests
// below use and logs how long it took.
func startCluster(t *testing.T) *RedisCluster {
	t.Helper()
	start := time.Now()
	c := StartRedisCluster(t, 3, 1)
	t.Logf("cluster of %d nodes up in %s", len(c.Nodes), time.Since(start).Round(time.Millisecond))
	if p, r := len(c.Primaries()), len(c.Replicas()); p != 3 || r != 3 {
		t.Fatalf("%d primaries and %d replicas, want 3 and 3", p, r)
	}
	return c
}

func TestRedisClusterSpreadsHashTags(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	cc := c.Client(t)
	ctx := Ctx(t, 30*time.Second)
	seen := map[string]int{}
	for i := range 16 {
		key := fmt.Sprintf("{hourglass:%d}", i)
		val := "v" + strconv.Itoa(i)
		if err := cc.Set(ctx, key, val, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
		if got, err := cc.Get(ctx, key).Result(); err != nil || got != val {
			t.Fatalf("GET %s = %q, %v; want %q", key, got, err, val)
		}
		owner := c.PrimaryFor(key)
		// A plain client sees the key only on the node that serves it
		// (any other answers MOVED), and both agree on the slot.
		direct := owner.Client(t)
		if got, err := direct.Get(ctx, key).Result(); err != nil || got != val {
			t.Fatalf("GET %s directly on %s = %q, %v; want %q", key, owner.Addr, got, err, val)
		}
		if slot, err := direct.ClusterKeySlot(ctx, key).Result(); err != nil || int(slot) != KeySlot(key) {
			t.Fatalf("CLUSTER KEYSLOT %s = %d, %v; KeySlot says %d", key, slot, err, KeySlot(key))
		}
		seen[owner.Addr]++
	}
	t.Logf("keys per primary: %v", seen)
	direct := c.Nodes[0].Client(t)
	for _, key := range []string{"", "foo", "{}", "{}x", "foo{}{bar}", "{user1000}.following", "foo{{bar}}zap", "{a"} {
		if slot, err := direct.ClusterKeySlot(ctx, key).Result(); err != nil || int(slot) != KeySlot(key) {
			t.Errorf("CLUSTER KEYSLOT %q = %d, %v; KeySlot says %d", key, slot, err, KeySlot(key))
		}
	}
	for _, addr := range c.Addrs() {
		if seen[addr] == 0 {
			t.Errorf("no hash tag landed on primary %s: %v", addr, seen)
		}
	}
}

// preloaded is how many keys the migration test puts into its slot before
// it moves it.
const preloaded = 3000

func TestRedisClusterMigrateSlotUnderLoad(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	cc := c.Client(t)
	ctx := Ctx(t, 30*time.Second)
	const tag = "{hourglass:0}"
	slot := KeySlot(tag)
	from := c.NodeForSlot(slot)
	var to *ClusterNode
	for _, p := range c.Primaries() {
		if p != from {
			to = p
			break
		}
	}

	// Populate the slot so that the migration takes several batches.
	pipe := cc.Pipeline()
	for i := range preloaded {
		pipe.Set(ctx, fmt.Sprintf("%s:pre:%d", tag, i), i, 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatalf("preload: %v", err)
	}

	// The load: a writer that keeps creating keys of the slot, counting
	// them in one more, and reading back fresh and preloaded keys. It
	// finishes its round when told to stop, so that every write it made
	// is counted.
	var (
		writes   atomic.Int64 // acknowledged SET+INCR rounds
		failed   atomic.Bool
		loadErr  error // read only after stop
		stopLoad = make(chan struct{})
		load     sync.WaitGroup
	)
	load.Go(func() {
		for n := int64(0); ; n++ {
			select {
			case <-stopLoad:
				return
			default:
			}
			if err := oneRound(ctx, cc, tag, n, &writes); err != nil {
				loadErr = fmt.Errorf("round %d: %w", n, err)
				failed.Store(true)
				return
			}
		}
	})
	var once sync.Once
	stop := func() { once.Do(func() { close(stopLoad) }); load.Wait() }
	defer stop()

	WaitFor(t, 10*time.Second, "the load to start", func() (bool, string) {
		return writes.Load() >= 50 || failed.Load(), fmt.Sprint(writes.Load(), " rounds")
	})
	before := writes.Load()
	start := time.Now()
	if err := c.MigrateSlot(ctx, slot, to); err != nil {
		stop()
		t.Fatalf("MigrateSlot %d %s -> %s: %v (load: %v)", slot, from.Addr, to.Addr, err, loadErr)
	}
	during := writes.Load() - before
	t.Logf("migrated slot %d (%d+ keys) from %s to %s in %s with %d rounds of load meanwhile",
		slot, preloaded, from.Addr, to.Addr, time.Since(start).Round(time.Millisecond), during)
	after := writes.Load()
	WaitFor(t, 10*time.Second, "the load to continue after the migration", func() (bool, string) {
		return writes.Load() >= after+50 || failed.Load(), fmt.Sprint(writes.Load()-after, " rounds")
	})
	stop()
	if loadErr != nil {
		t.Fatalf("load failed: %v", loadErr)
	}
	if during == 0 {
		t.Errorf("no load ran during the migration")
	}

	if got := c.NodeForSlot(slot); got != to {
		t.Fatalf("slot %d served by %s after migration, want %s", slot, got.Addr, to.Addr)
	}
	n := writes.Load()
	want := int64(preloaded) + n + 1 // preloaded, written, the counter
	if got, err := to.Client(t).ClusterCountKeysInSlot(ctx, slot).Result(); err != nil || got != want {
		t.Errorf("keys in slot %d on %s = %d, %v; want %d", slot, to.Addr, got, err, want)
	}
	if got, err := from.Client(t).ClusterCountKeysInSlot(ctx, slot).Result(); err != nil || got != 0 {
		t.Errorf("keys in slot %d left on %s = %d, %v; want 0", slot, from.Addr, got, err)
	}
	if got, err := cc.Get(ctx, tag+":ctr").Int64(); err != nil || got != n {
		t.Errorf("counter = %d, %v; want %d acknowledged INCRs", got, err, n)
	}
	pipe = cc.Pipeline()
	gets := make([]*redis.StringCmd, 0, n+preloaded)
	for i := range n {
		gets = append(gets, pipe.Get(ctx, fmt.Sprintf("%s:w:%d", tag, i)))
	}
	for i := range preloaded {
		gets = append(gets, pipe.Get(ctx, fmt.Sprintf("%s:pre:%d", tag, i)))
	}
	_, _ = pipe.Exec(ctx)
	lost := 0
	for i, g := range gets {
		want := strconv.Itoa(i)
		if int64(i) >= n {
			want = strconv.Itoa(i - int(n))
		}
		if got, err := g.Result(); err != nil || got != want {
			lost++
			if lost <= 5 {
				t.Errorf("%s = %q, %v; want %q", g.Args()[1], got, err, want)
			}
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d keys lost or wrong", lost, len(gets))
	}
}

// oneRound writes key n of the load, counts it in the counter key and in
// writes, and reads it and a preloaded key back.
func oneRound(ctx context.Context, cc *redis.ClusterClient, tag string, n int64, writes *atomic.Int64) error {
	key := fmt.Sprintf("%s:w:%d", tag, n)
	if err := cc.Set(ctx, key, n, 0).Err(); err != nil {
		return fmt.Errorf("SET %s: %w", key, err)
	}
	if err := cc.Incr(ctx, tag+":ctr").Err(); err != nil {
		return fmt.Errorf("INCR: %w", err)
	}
	writes.Add(1)
	if got, err := cc.Get(ctx, key).Int64(); err != nil || got != n {
		return fmt.Errorf("GET %s = %d, %v", key, got, err)
	}
	pre := fmt.Sprintf("%s:pre:%d", tag, n%preloaded)
	if got, err := cc.Get(ctx, pre).Int64(); err != nil || got != n%preloaded {
		return fmt.Errorf("GET %s = %d, %v", pre, got, err)
	}
	return nil
}

func TestRedisClusterFailover(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	cc := c.Client(t)
	ctx := Ctx(t, 30*time.Second)
	const key = "{hourglass:1}"
	if err := cc.Set(ctx, key, "before", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	old := c.PrimaryFor(key)
	var replica *ClusterNode
	for _, r := range c.Replicas() {
		if isReplicaOf(ctx, t, r, old) {
			replica = r
		}
	}
	if replica == nil {
		t.Fatalf("no replica of %s", old.Addr)
	}
	start := time.Now()
	if err := c.Failover(ctx, replica); err != nil {
		t.Fatal(err)
	}
	t.Logf("failover to %s took %s", replica.Addr, time.Since(start).Round(time.Millisecond))
	if got := c.PrimaryFor(key); got != replica {
		t.Fatalf("%s served by %s after failover, want %s", key, got.Addr, replica.Addr)
	}
	if got, err := cc.Get(ctx, key).Result(); err != nil || got != "before" {
		t.Fatalf("GET after failover = %q, %v", got, err)
	}

	// Now kill the new primary: its replica, the old primary, takes over
	// by itself once the others see it fail. The write must have reached
	// that replica to survive, so WAIT for it on the writing connection.
	var wait *redis.Cmd
	if _, err := replica.Client(t).Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, key, "after", 0)
		wait = p.Do(ctx, "WAIT", 1, 5000)
		return nil
	}); err != nil || wait.Val() != int64(1) {
		t.Fatalf("SET+WAIT on %s: %v, WAIT = %v", replica.Addr, err, wait.Val())
	}
	replica.Kill()
	killed := time.Now()
	if err := c.WaitConsistent(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("automatic failover back to %s took %s", old.Addr, time.Since(killed).Round(time.Millisecond))
	if got := c.PrimaryFor(key); got != old {
		t.Fatalf("%s served by %s after the kill, want %s", key, got.Addr, old.Addr)
	}
	// go-redis v9 does not reload the slot map when a node refuses
	// connections (redis/go-redis#3979; by itself only after
	// ClusterStateReloadInterval, 60 s): ask it to, then wait for the
	// reload, which runs in the background.
	cc.ReloadState(ctx)
	WaitFor(t, 10*time.Second, "GET through the cluster client after the kill", func() (bool, string) {
		got, err := cc.Get(ctx, key).Result()
		return err == nil && got == "after", fmt.Sprintf("%q, %v", got, err)
	})
}

// isReplicaOf reports whether r replicates p.
func isReplicaOf(ctx context.Context, t *testing.T, r, p *ClusterNode) bool {
	info, err := r.Client(t).Info(ctx, "replication").Result()
	if err != nil {
		t.Fatalf("INFO on %s: %v", r.Addr, err)
	}
	f := infoFields(info)
	return f["role"] == "slave" && "127.0.0.1:"+f["master_port"] == p.Addr
}
