package shard

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestReadyAnnouncements: a script that makes a ready list non-empty
// announces it on the shard channel named like the list, with the number
// of entries pushed; a push onto a list that already has entries is not
// announced (move.lua's single-task and batch paths, release.lua).
func TestReadyAnnouncements(t *testing.T) {
	t.Parallel()
	s, rdb := newTestStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	l := s.Layout()
	ids := func(n int, prefix string) []string {
		var out []string
		for i := 0; len(out) < n; i++ {
			if id := fmt.Sprintf("%s%d", prefix, i); l.ShardOf(id) == 0 {
				out = append(out, id)
			}
		}
		return out
	}
	ready := l.Ready(0, "default")
	ps := rdb.SSubscribe(ctx, ReadyChannel(ready))
	defer ps.Close()
	if _, err := ps.ReceiveTimeout(ctx, 5*time.Second); err != nil { // the confirmation
		t.Fatal(err)
	}
	enqueueMove := func(ids ...string) {
		t.Helper()
		args := make([]EnqueueArgs, len(ids))
		for i, id := range ids {
			args[i] = EnqueueArgs{ID: id, Queue: "default", MaxRetries: -1}
		}
		for _, r := range s.EnqueueBatch(ctx, args) {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		if res, err := s.Move(ctx, 0, 1, 1000); err != nil || res.Moved != len(ids) {
			t.Fatalf("move: %+v, %v", res, err)
		}
	}
	// next returns the next announcement's payload, or "" if none
	// arrives before a PING sent after the pushes comes back: pub/sub
	// replies keep their order, so nothing announced is still on the way.
	next := func() string {
		t.Helper()
		if err := ps.Ping(ctx, "fence"); err != nil {
			t.Fatal(err)
		}
		for {
			m, err := ps.ReceiveTimeout(ctx, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			switch m := m.(type) {
			case *redis.Message:
				pong, err := ps.ReceiveTimeout(ctx, 5*time.Second)
				if _, ok := pong.(*redis.Pong); !ok || err != nil {
					t.Fatalf("after the announcement: %v, %v", pong, err)
				}
				return m.Payload
			case *redis.Pong:
				return ""
			}
		}
	}
	batch := ids(5, "a")
	enqueueMove(batch[0])
	if got := next(); got != "1" {
		t.Fatalf("one task made the list non-empty: announcement %q, want \"1\"", got)
	}
	enqueueMove(batch[1])
	if got := next(); got != "" {
		t.Fatalf("a push onto a non-empty list announced %q", got)
	}
	if _, entries, err := s.Pop(ctx, []string{ready}, 10, time.Second); err != nil || len(entries) != 2 {
		t.Fatalf("pop: %v, %v", entries, err)
	}
	enqueueMove(batch[2:]...)
	if got := next(); got != "3" {
		t.Fatalf("a batch of 3 made the list non-empty: announcement %q, want \"3\"", got)
	}
	_, entries, err := s.Pop(ctx, []string{ready}, 10, time.Second)
	if err != nil || len(entries) != 3 {
		t.Fatalf("pop: %v, %v", entries, err)
	}
	d, ok := s.Popped(0, entries[0], time.Now(), time.Minute)
	if !ok {
		t.Fatalf("entry %q", entries[0])
	}
	if err := s.Release(ctx, d); err != nil {
		t.Fatal(err)
	}
	if got := next(); got != "1" {
		t.Fatalf("a release onto an empty list: announcement %q, want \"1\"", got)
	}
}

// TestPopNode: on a Redis Cluster, popnode.lua pops from the first
// non-empty of several lists of one node in several slots, at most count
// entries; it reports the keys of another node as not local and a key of
// another type as failed, and pops nothing else.
func TestPopNode(t *testing.T) {
	t.Parallel()
	rc := testenv.StartRedisCluster(t, 3, 0)
	cc := rc.Client(t)
	l, err := NewLayout("hgtest", 16)
	if err != nil {
		t.Fatal(err)
	}
	s := NewStore(cc, l)
	ctx := testenv.Ctx(t, 30*time.Second)
	// Shards by primary, in shard order.
	byNode := map[string][]int{}
	var nodes []string
	for sh := range 16 {
		a := rc.PrimaryFor(l.Tag(sh)).Addr
		if byNode[a] == nil {
			nodes = append(nodes, a)
		}
		byNode[a] = append(byNode[a], sh)
	}
	var local []int
	for _, a := range nodes {
		if len(byNode[a]) >= 3 {
			local = byNode[a]
			break
		}
	}
	if local == nil {
		t.Fatalf("no primary serves 3 shards: %v", byNode)
	}
	other := -1
	for sh := range 16 {
		if !slices.Contains(local, sh) {
			other = sh
			break
		}
	}
	empty, full, wrong := l.Ready(local[0], "q"), l.Ready(local[1], "q"), l.Ready(local[2], "q")
	elsewhere := l.Ready(other, "q")
	if err := cc.RPush(ctx, full, "1|a|x", "2|b|x", "3|c|x").Err(); err != nil {
		t.Fatal(err)
	}
	if err := cc.RPush(ctx, elsewhere, "9|z|x").Err(); err != nil {
		t.Fatal(err)
	}
	if err := cc.Set(ctx, wrong, "not a list", 0).Err(); err != nil {
		t.Fatal(err)
	}

	r, err := s.PopNode(ctx, []string{empty, full}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if r.Key != full || !slices.Equal(r.Entries, []string{"1|a|x", "2|b|x"}) {
		t.Fatalf("pop of two: %+v", r)
	}
	r, err = s.PopNode(ctx, []string{wrong, empty, elsewhere}, 5)
	if err != nil {
		t.Fatal(err)
	}
	if r.Key != "" || len(r.Entries) != 0 || !slices.Equal(r.NonLocal, []string{elsewhere}) || r.Failed[wrong] == "" || len(r.Failed) != 1 {
		t.Fatalf("nothing poppable: %+v", r)
	}
	if n, err := cc.LLen(ctx, elsewhere).Result(); err != nil || n != 1 {
		t.Fatalf("the other node's list has %d entries (%v), want its 1 untouched", n, err)
	}
	r, err = s.PopNode(ctx, []string{elsewhere, full}, 5)
	if err != nil {
		t.Fatal(err)
	}
	// Routed by its first key, the call ran on the other node: there
	// that list is local and full's is not.
	if r.Key != elsewhere || !slices.Equal(r.Entries, []string{"9|z|x"}) {
		t.Fatalf("routed by the first key: %+v", r)
	}
	r, err = s.PopNode(ctx, []string{full}, 5)
	if err != nil || r.Key != full || !slices.Equal(r.Entries, []string{"3|c|x"}) {
		t.Fatalf("the rest: %+v, %v", r, err)
	}
	if r, err := s.PopNode(context.Background(), nil, 5); err != nil || r.Key != "" {
		t.Fatalf("no keys: %+v, %v", r, err)
	}
}

// TestPopNodeWhenOutOfMemory: popnode.lua still pops when Redis is above
// maxmemory with noeviction (a script with flags but without allow-oom
// is refused then, and workers would stop draining the lists).
func TestPopNodeWhenOutOfMemory(t *testing.T) {
	t.Parallel()
	s, rdb := newTestStore(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	key := s.Layout().Ready(0, "default")
	if err := rdb.RPush(ctx, key, "1|a|x").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	defer rdb.ConfigSet(context.Background(), "maxmemory", "0")
	if err := rdb.Set(ctx, "probe", "x", 0).Err(); err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("Redis is not out of memory: a write gave %v", err)
	}
	r, err := s.PopNode(ctx, []string{key}, 5)
	if err != nil || r.Key != key || !slices.Equal(r.Entries, []string{"1|a|x"}) {
		t.Fatalf("pop when out of memory: %+v %v", r, err)
	}
}
