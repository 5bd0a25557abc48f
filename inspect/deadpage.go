package inspect

import (
	"context"
	"slices"
	"strconv"

	"github.com/hourglass-sched/hourglass/internal/shard"
)

// deadKey is where a dead letter sorts in a newest-first listing: by
// burial time, then by id, both going down.
type deadKey struct {
	at float64
	id string
}

// above reports whether a is listed before b (newer, or as new and a
// greater id).
func (a deadKey) above(b deadKey) bool {
	return a.at > b.at || (a.at == b.at && a.id > b.id)
}

func cursorKey(c shard.Cursor) deadKey {
	at, _ := strconv.ParseFloat(c.Score, 64)
	return deadKey{at: at, id: c.Member}
}

// deadNewest returns the page of dead letters after c, newest first across
// every shard: each shard is read going down from the cursor, at most
// limit entries examined in each, and the page holds the matches that
// every shard not exhausted has examined, merged, at most limit of them.
// The next cursor is the last one returned when the page is full, else
// the least advanced shard's frontier (the page may then be short, but
// every shard moved on by at least one entry); "" when every shard is
// exhausted.
func (i *Inspector) deadNewest(ctx context.Context, c cursor, limit int) (Page, error) {
	l, err := i.layout(ctx)
	if err != nil {
		return Page{}, err
	}
	f := c.filter()
	f.Desc = true
	type hit struct {
		t   Task
		key deadKey
	}
	var hits []hit
	var bound *deadKey // the least advanced frontier of a shard not exhausted
	for sh := range l.Existing() {
		es, next, done, err := i.store.PageSet(ctx, sh, shard.SetDead, c.Set, limit, f)
		if err != nil {
			return Page{}, mapErr(err)
		}
		for _, e := range es {
			hits = append(hits, hit{t: e.View(string(StateDead), sh), key: deadKey{at: float64(e.Score), id: e.ID}})
		}
		if k := cursorKey(next); !done && (bound == nil || k.above(*bound)) {
			bound = &k
		}
	}
	// Below the bound some shard has not looked yet.
	hits = slices.DeleteFunc(hits, func(h hit) bool { return bound != nil && bound.above(h.key) })
	slices.SortFunc(hits, func(a, b hit) int {
		switch {
		case a.key.above(b.key):
			return -1
		case b.key.above(a.key):
			return 1
		}
		return 0
	})
	p := Page{Tasks: []Task{}}
	for _, h := range hits[:min(len(hits), limit)] {
		p.Tasks = append(p.Tasks, h.t)
	}
	next := bound
	if len(hits) > limit {
		next = &hits[limit-1].key
	}
	if next != nil {
		c.Set = shard.Cursor{Score: strconv.FormatFloat(next.at, 'f', -1, 64), Member: next.id}
		p.Cursor = c.encode()
	}
	return p, nil
}
