package shard

import (
	"sync"
	"testing"
)

// TestRunsPlaceIDsInRuns: generated ids come RunLength in a row in one
// shard, the shards in turn, every shard its share; each id is a fresh,
// legal id of NewID's form.
func TestRunsPlaceIDsInRuns(t *testing.T) {
	for _, n := range []int{2, 3, 16, 100, MaxRunShards} {
		l, err := NewLayout("ns", n)
		if err != nil {
			t.Fatal(err)
		}
		var r Runs
		seen := map[string]bool{}
		per := make([]int, n)
		prev := -1
		for i := 0; i < 2*n*RunLength; i++ {
			id := r.NewID(l)
			if len(id) != 16 || !ValidID(id) || seen[id] {
				t.Fatalf("%d shards: id %d %q: want a fresh, legal 16-character id", n, i, id)
			}
			seen[id] = true
			sh := l.ShardOf(id)
			per[sh]++
			switch {
			case i%RunLength != 0 && sh != prev:
				t.Fatalf("%d shards: id %d in shard %d, in the middle of a run in shard %d", n, i, sh, prev)
			case i > 0 && i%RunLength == 0 && sh != (prev+1)%n:
				t.Fatalf("%d shards: run after shard %d is in shard %d, want the next", n, prev, sh)
			}
			prev = sh
		}
		for sh, c := range per {
			if c != 2*RunLength {
				t.Fatalf("%d shards: shard %d got %d ids, want %d", n, sh, c, 2*RunLength)
			}
		}
	}
}

// TestRunsFollowTheLayout: a run is placed by the layout of each call: a
// run in a shard that a smaller count lacks ends, and the next run is in
// the shard after it, modulo the new count, for RunLength ids; one shard,
// more than MaxRunShards or the zero Layout place by hash alone.
func TestRunsFollowTheLayout(t *testing.T) {
	big, _ := NewLayout("ns", 16)
	small, _ := NewLayout("ns", 4)
	var r Runs
	sh := big.ShardOf(r.NewID(big))
	for sh < 4 {
		sh = big.ShardOf(r.NewID(big))
	}
	want := (sh + 1) % 4
	for i := 0; i < RunLength; i++ {
		if got := small.ShardOf(r.NewID(small)); got != want {
			t.Fatalf("id %d after a run in shard %d of 16: shard %d of 4, want %d", i, sh, got, want)
		}
	}
	if got := small.ShardOf(r.NewID(small)); got != (want+1)%4 {
		t.Fatalf("after a run in shard %d of 4: shard %d, want the next", want, got)
	}
	for _, l := range []Layout{must(NewLayout("ns", 1)), must(NewLayout("ns", MaxRunShards+1)), {}} {
		shards := map[int]bool{}
		for i := 0; i < 200; i++ {
			id := r.NewID(l)
			if !ValidID(id) || len(id) != 16 {
				t.Fatalf("%d shards: id %q", l.Shards(), id)
			}
			if l.Shards() > 0 {
				shards[l.ShardOf(id)] = true
			}
		}
		if l.Shards() > 1 && len(shards) < 100 {
			t.Fatalf("%d shards: 200 ids in %d shards, want them spread by hash", l.Shards(), len(shards))
		}
	}
}

func must(l Layout, err error) Layout {
	if err != nil {
		panic(err)
	}
	return l
}

// TestRunsConcurrent: ids generated from many goroutines at once are all
// distinct, and the runs still give each shard its share.
func TestRunsConcurrent(t *testing.T) {
	l, _ := NewLayout("ns", 8)
	var r Runs
	const workers, each = 8, 8 * RunLength
	ids := make([][]string, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range each {
				ids[w] = append(ids[w], r.NewID(l))
			}
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	per := make([]int, 8)
	for _, list := range ids {
		for _, id := range list {
			if seen[id] {
				t.Fatalf("id %q generated twice", id)
			}
			seen[id] = true
			per[l.ShardOf(id)]++
		}
	}
	for sh, c := range per {
		if c != workers*each/8 {
			t.Fatalf("shard %d got %d ids, want %d", sh, c, workers*each/8)
		}
	}
}

func BenchmarkRunsNewID(b *testing.B) {
	l, _ := NewLayout("ns", DefaultShards)
	var r Runs
	for b.Loop() {
		r.NewID(l)
	}
}

// TestIDInEveryShardCount: idIn finds an id of the asked shard for any
// shard count up to MaxShards (freshID uses it for every count).
func TestIDInEveryShardCount(t *testing.T) {
	for _, n := range []int{1, 2, 7, 64, 1000, MaxShards} {
		for _, sh := range []int{0, n / 2, n - 1} {
			id := idIn(n, sh)
			l, _ := NewLayout("ns", n)
			if len(id) != 16 || !ValidID(id) || l.ShardOf(id) != sh {
				t.Fatalf("idIn(%d, %d) = %q, in shard %d", n, sh, id, l.ShardOf(id))
			}
		}
	}
}
