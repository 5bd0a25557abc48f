package inspect_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestListDeadNewestFirst (#29): the dead-letter list comes newest first
// across the shards, ties by id going down, each matching letter once,
// page after page, with a filter applied; a cursor of another listing is
// refused.
func TestListDeadNewestFirst(t *testing.T) {
	t.Parallel()
	e, in := newInspector(t, 4)
	ctx := testenv.Ctx(t, 30*time.Second)
	l := e.Layout()
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	type letter struct {
		id  string
		at  time.Time
		err string
	}
	var all []letter
	pipe := e.RDB.Pipeline()
	for i := range 80 {
		// Burial times out of id order, pairs sharing one (ties), some
		// letters of another error, and 20 buried at the same moment: a
		// tie larger than a page, across the shards.
		lt := letter{id: fmt.Sprintf("d%02d", i), at: base.Add(time.Duration((i*37)%60/2) * time.Second), err: "partner timeout"}
		if i >= 60 {
			lt.at = base.Add(-time.Minute)
		}
		if i%5 == 0 {
			lt.err = "refused"
		}
		all = append(all, lt)
		sh := l.ShardOf(lt.id)
		rec, _ := json.Marshal(map[string]any{"reason": "max retries exhausted", "error": lt.err, "at": lt.at.UnixMilli()})
		pipe.HSet(ctx, l.Tasks(sh), lt.id, shard.Encode(shard.Task{Queue: "a", Attempts: 4, MaxRetries: 3, Timeout: time.Second, Due: base, Enqueued: base}))
		pipe.ZAdd(ctx, l.Dead(sh), redis.Z{Score: float64(lt.at.UnixMilli()), Member: lt.id})
		pipe.HSet(ctx, l.DeadInfo(sh), lt.id, rec)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	newestFirst := func(f func(letter) bool) []string {
		var want []letter
		for _, lt := range all {
			if f(lt) {
				want = append(want, lt)
			}
		}
		slices.SortFunc(want, func(a, b letter) int {
			if c := b.at.Compare(a.at); c != 0 {
				return c
			}
			if a.id > b.id {
				return -1
			}
			return 1
		})
		var ids []string
		for _, lt := range want {
			ids = append(ids, lt.id)
		}
		return ids
	}
	for _, c := range []struct {
		name   string
		filter inspect.DeadFilter
		want   []string
	}{
		{"all", inspect.DeadFilter{}, newestFirst(func(letter) bool { return true })},
		{"filtered", inspect.DeadFilter{ErrorContains: "timeout"}, newestFirst(func(lt letter) bool { return lt.err != "refused" })},
	} {
		for _, limit := range []int{7, 3} {
			testListDead(t, in, c.name, c.filter, limit, c.want)
		}
	}
	p, err := in.ListDead(ctx, inspect.DeadFilter{}, "", 7)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.ListDead(ctx, inspect.DeadFilter{Queue: "a"}, p.Cursor, 7); err == nil {
		t.Fatal("a cursor of another filter was accepted")
	}
	sp, err := in.ListTasks(ctx, inspect.ListOptions{State: inspect.StateDead, Limit: 7})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.ListDead(ctx, inspect.DeadFilter{}, sp.Cursor, 7); err == nil {
		t.Fatal("a ListTasks cursor was accepted by ListDead")
	}
}

// testListDead pages through ListDead with filter f, limit entries a page,
// and checks the ids listed against want, in order.
func testListDead(t *testing.T, in *inspect.Inspector, name string, f inspect.DeadFilter, limit int, want []string) {
	t.Helper()
	ctx := testenv.Ctx(t, 30*time.Second)
	var got []string
	cur, pages := "", 0
	for {
		p, err := in.ListDead(ctx, f, cur, limit)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Tasks) > limit {
			t.Fatalf("%s: a page of %d", name, len(p.Tasks))
		}
		for _, tk := range p.Tasks {
			got = append(got, tk.ID)
			if tk.State != inspect.StateDead || tk.Dead == nil {
				t.Fatalf("%s: listed %+v", name, tk)
			}
		}
		cur, pages = p.Cursor, pages+1
		if cur == "" || pages > 4*len(want) {
			break
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s, pages of %d: listed %v\nwant      %v", name, limit, got, want)
	}
	t.Logf("%s: %d letters in %d pages of %d", name, len(got), pages, limit)
}
