package shard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/errtext"
)

// Changing the shard count online (docs/resharding.md). The layout is
// data: the record {ns}:layout says how many shards there are, at which
// generation, and whether a change runs. Shard s keeps its keys ({ns:s})
// in every generation: a change only moves the tasks whose shard differs,
// from the shard of the old count to that of the new one. Each shard also
// carries a marker (Layout.Marker), which enqueue.lua reads to redirect a
// producer still on an older generation.

// Errors of the layout record.
var (
	// ErrLayoutChanged reports an enqueue refused by a shard whose marker
	// is of a newer generation than the caller's layout: nothing was
	// written. The error carries the new layout (LayoutOf); EnqueueBatch
	// follows it by itself.
	ErrLayoutChanged = errors.New("hourglass: layout changed")
	// ErrResizeRunning reports a resize refused because another change
	// runs.
	ErrResizeRunning = errors.New("hourglass: a change of the shard count is running")
	// ErrCorruptLayout reports a layout record or marker that does not
	// parse.
	ErrCorruptLayout = errors.New("hourglass: corrupt layout record")
	// ErrInTransit reports an id that a change of the shard count is
	// moving between two shards, where the operation cannot act on it
	// (an enqueue of an id cancelled on its way, whose imported copy the
	// reshard has not removed yet; a dead-letter replay of an id between
	// export and import): nothing was done. It wraps ErrTryAgain.
	ErrInTransit = fmt.Errorf("%w: the id is on its way to its new shard", ErrTryAgain)
	// ErrStaleLayout reports a reshard step refused because the
	// shard's marker says another change (the caller's layout is out of
	// date): nothing was written.
	ErrStaleLayout = errors.New("hourglass: the reshard's layout is out of date")
)

// Layout record states.
const (
	LayoutStable     = "stable"
	LayoutPreparing  = "preparing"
	LayoutResharding = "resharding"
	// layoutMigrating is LayoutResharding's name in records written
	// before it was renamed; it reads as LayoutResharding.
	layoutMigrating = "migrating"
)

// LayoutRecord is the layout record as stored.
type LayoutRecord struct {
	// Layout is the layout components use: the stored one, or while a
	// change prepares (the markers are being written) the one it leaves.
	// Without a record, the layout the store was made with.
	Layout Layout
	// State is LayoutStable, LayoutPreparing or LayoutResharding; "" when
	// there is no record (the shard count was never changed).
	State string
	// Gen, Shards and From are the stored generation and counts.
	Gen          int64
	Shards, From int
	// Placement and FromPlacement are the placement rules that go with
	// Shards and From.
	Placement, FromPlacement Placement
	// Started and Finished are when the last change began and ended.
	Started, Finished time.Time
	// Done lists the shards that have nothing left to move.
	Done []int
	// Moved counts the tasks the change has moved so far.
	Moved int64
}

// newer reports whether m supersedes l: a later generation, or the same
// one once its change has ended.
func (m Layout) newer(l Layout) bool {
	return m.gen > l.gen || (m.gen == l.gen && m.from == 0 && l.from != 0)
}

// SetLayout makes l the store's layout if it is newer than the current one
// (a later generation, or the end of the running change) and reports
// whether it did; the store's follower hears of it (FollowConfig.OnChange).
// Enqueue, cancel and lookup place and look for ids by it. Reading the
// record (ReadLayout, a Follower) adopts what it says by itself.
func (s *Store) SetLayout(l Layout) bool {
	for {
		cur := s.cur.Load()
		if l.ns != cur.ns || !l.newer(*cur) {
			return false
		}
		if s.cur.CompareAndSwap(cur, &l) {
			if f := s.follower.Load(); f != nil && f.cfg.OnChange != nil {
				f.cfg.OnChange(*cur, l)
			}
			return true
		}
	}
}

// ReadLayout reads the layout record, and adopts its layout if it is
// newer than the store's (SetLayout).
func (s *Store) ReadLayout(ctx context.Context) (LayoutRecord, error) {
	r, err := s.readLayout(ctx)
	if err == nil {
		s.SetLayout(r.Layout)
	}
	return r, err
}

func (s *Store) readLayout(ctx context.Context) (LayoutRecord, error) {
	m, err := s.rdb.HGetAll(ctx, s.k.Record()).Result()
	if err != nil {
		return LayoutRecord{}, errtext.Errorf("read layout: %w", err)
	}
	if len(m) == 0 {
		return LayoutRecord{Layout: *s.base}, nil
	}
	r := LayoutRecord{State: m["state"]}
	num := func(k string) int64 {
		n, perr := strconv.ParseInt(m[k], 10, 64)
		if perr != nil && err == nil {
			err = fmt.Errorf("%w: field %s = %q", ErrCorruptLayout, k, m[k])
		}
		return n
	}
	r.Gen = num("gen")
	to, terr := parseCount(m["shards"])
	from, ferr := parseCount(cmp.Or(m["from"], "0"))
	if err == nil {
		err = cmp.Or(terr, ferr)
	}
	r.Shards, r.Placement, r.From, r.FromPlacement = to.n, to.place, from.n, from.place
	r.Moved = num("moved")
	if v := m["started_ms"]; v != "" {
		r.Started = time.UnixMilli(num("started_ms"))
	}
	if v := m["finished_ms"]; v != "" {
		r.Finished = time.UnixMilli(num("finished_ms"))
	}
	for k := range m {
		if d, ok := strings.CutPrefix(k, "done:"); ok {
			if n, aerr := strconv.Atoi(d); aerr == nil {
				r.Done = append(r.Done, n)
			}
		}
	}
	if err != nil {
		return r, err
	}
	switch r.State {
	case LayoutStable:
		r.Layout, err = s.base.withRules(r.Gen, to, count{})
	case LayoutResharding, layoutMigrating:
		r.State = LayoutResharding
		r.Layout, err = s.base.withRules(r.Gen, to, from)
	case LayoutPreparing:
		// Producers keep the layout being left until every marker says
		// the new one (BeginResize): the generation before, stable.
		r.Layout, err = s.base.withRules(r.Gen-1, from, count{})
	default:
		err = fmt.Errorf("%w: state %q", ErrCorruptLayout, r.State)
	}
	return r, err
}

// RefreshLayout reads the layout record, adopts it if it is newer
// (SetLayout) and returns the store's layout after that.
func (s *Store) RefreshLayout(ctx context.Context) (Layout, error) {
	_, err := s.ReadLayout(ctx)
	return s.Layout(), err
}

// LayoutChanged is published on the control channel after each change of
// the layout record, followed by the generation.
const LayoutChanged = "layout"

// BeginResize starts changing the shard count to n, keeping the
// placement rule (BeginChange).
func (s *Store) BeginResize(ctx context.Context, n int) (Layout, error) {
	return s.beginChange(ctx, n, 0, true)
}

// BeginChange starts changing the shard count to n and the placement rule
// to p: it bumps the generation (compare-and-set), registers the queues
// in the shards that are new, writes every shard's marker, then marks the
// change resharding and announces it on the control channel. Each old
// shard's owner then moves the tasks whose shard changed
// (internal/reshard). A change left "preparing" by a crash is finished by
// calling it again with the same n and p. It returns the new layout, or
// ErrResizeRunning.
func (s *Store) BeginChange(ctx context.Context, n int, p Placement) (Layout, error) {
	return s.beginChange(ctx, n, p, false)
}

func (s *Store) beginChange(ctx context.Context, n int, p Placement, keep bool) (Layout, error) {
	if n < 1 || n > MaxShards {
		return Layout{}, fmt.Errorf("%w: shard count %d not in 1..%d", ErrInvalidArgument, n, MaxShards)
	}
	if p > PlaceByKey {
		return Layout{}, fmt.Errorf("%w: placement %d", ErrInvalidArgument, p)
	}
	r, err := s.ReadLayout(ctx)
	if err != nil {
		return Layout{}, err
	}
	var gen int64
	var from count
	to := count{n, p}
	switch r.State {
	case "", LayoutStable:
		from = r.Layout.target()
		if r.State == "" {
			// Never changed: the count is what the schedulers registered
			// (shard 0's marker), not the caller's configuration.
			if from.n, err = s.registeredCount(ctx, from.n); err != nil {
				return Layout{}, err
			}
		}
		if keep {
			to.place = from.place
		}
		if from == to {
			return r.Layout, nil
		}
		ok, at, state, err := s.layoutOp(ctx, "begin", r.Layout.Gen(), to.String(), from.String())
		if err != nil {
			return Layout{}, errtext.Errorf("begin resize: %w", err)
		}
		if !ok {
			return Layout{}, fmt.Errorf("%w: the record changed meanwhile (generation %d, %s)", ErrResizeRunning, at, state)
		}
		gen = at
	case LayoutPreparing:
		if keep {
			to.place = r.Placement
		}
		if r.Shards != n || r.Placement != to.place {
			return Layout{}, fmt.Errorf("%w: a change to %d shards placed by %s was left half-prepared; run it again with them to finish it", ErrResizeRunning, r.Shards, r.Placement)
		}
		gen, from = r.Gen, count{r.From, r.FromPlacement}
	default:
		return Layout{}, fmt.Errorf("%w: generation %d moves %d shards to %d", ErrResizeRunning, r.Gen, r.From, r.Shards)
	}
	next, err := s.base.withRules(gen, to, from)
	if err != nil {
		return Layout{}, err
	}
	// The queues of the new shards first: a producer sends tasks there as
	// soon as it sees the new layout.
	if err := s.copyQueues(ctx, from.n, n); err != nil {
		return Layout{}, err
	}
	// The markers in two rounds. First every shard refuses producers on
	// the old generation without redirecting them (they retry): once it
	// is done, none can store a task by the old count. Then every shard
	// redirects them to the new count. So a producer redirected by one
	// shard cannot race one that still stores by the old count in
	// another, which the dedupe check in the old shard relies on.
	sealed := next
	sealed.shards, sealed.from, sealed.place, sealed.fromPlace = 0, 0, PlaceByID, PlaceByID
	if err := s.writeMarkers(ctx, sealed, next.Existing()); err != nil {
		return Layout{}, err
	}
	if err := s.writeMarkers(ctx, next, next.Existing()); err != nil {
		return Layout{}, err
	}
	ok, at, state, err := s.layoutOp(ctx, "start", gen)
	if err != nil {
		return Layout{}, errtext.Errorf("start resize: %w", err)
	}
	if !ok && (at != gen || state == LayoutPreparing) {
		return Layout{}, fmt.Errorf("%w: generation %d could not start: the record is at generation %d, %s", ErrResizeRunning, gen, at, state)
	}
	if !ok && state == LayoutStable {
		// Another caller finished setting it up, and the change has
		// ended since: put back the markers its end wrote.
		stable, err := s.base.withRules(gen, to, count{})
		if err != nil {
			return Layout{}, err
		}
		return stable, s.writeMarkers(ctx, stable, next.Existing())
	}
	// Again, for a queue registered while the markers were written (a
	// scheduler that started meanwhile registered by the old count).
	if err := s.copyQueues(ctx, from.n, n); err != nil {
		return Layout{}, err
	}
	s.SetLayout(next)
	s.announceLayout(ctx, gen)
	return next, nil
}

// layoutOp runs layout.lua's operation op and returns whether it
// succeeded and the generation (and, on failure, the state) the record
// is at.
func (s *Store) layoutOp(ctx context.Context, op string, args ...any) (ok bool, gen int64, state string, err error) {
	v, err := layoutScript.Run(ctx, s.rdb, []string{s.k.Record()}, append([]any{op}, args...)...).Slice()
	if err != nil {
		return false, 0, "", err
	}
	code, _ := v[0].(int64)
	if len(v) > 1 {
		gen, _ = v[1].(int64)
	}
	if len(v) > 2 {
		state, _ = v[2].(string)
	}
	return code == 1, gen, state, nil
}

// registeredCount returns the shard count the schedulers registered
// before any change (shard 0's marker, "0|N|0"), or def when there is
// none (nothing registered yet).
func (s *Store) registeredCount(ctx context.Context, def int) (int, error) {
	m, err := s.rdb.Get(ctx, s.k.Marker(0)).Result()
	if errors.Is(err, redis.Nil) {
		return def, nil
	}
	if err != nil {
		return 0, errtext.Errorf("read shard 0's layout marker: %w", err)
	}
	f := strings.Split(m, "|")
	n, perr := strconv.Atoi(f[min(1, len(f)-1)])
	if len(f) != 3 || f[0] != "0" || perr != nil || n < 1 || n > MaxShards {
		return 0, fmt.Errorf("%w: shard 0's marker %q without a layout record", ErrCorruptLayout, m)
	}
	return n, nil
}

// writeMarkers sets the marker of shards 0..n-1 to l.
func (s *Store) writeMarkers(ctx context.Context, l Layout, n int) error {
	v := markerValue(l)
	pipe := s.rdb.Pipeline()
	for sh := 0; sh < n; sh++ {
		pipe.Set(ctx, s.k.Marker(sh), v, 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return errtext.Errorf("write the layout markers: %w", err)
	}
	return nil
}

func (s *Store) announceLayout(ctx context.Context, gen int64) {
	_ = s.rdb.Publish(ctx, s.k.ControlChannel(), LayoutChanged+" "+strconv.FormatInt(gen, 10)).Err()
}

// ShardDone records that shard sh has nothing left to move in l's change.
// The call that finds every shard of the span done ends the change: the
// record becomes stable, the markers say so, and it is announced; then
// ended is true.
func (s *Store) ShardDone(ctx context.Context, l Layout, sh int) (ended bool, err error) {
	ok, last, _, err := s.layoutOp(ctx, "done", l.gen, sh, l.Existing())
	if err != nil {
		return false, errtext.Errorf("record shard %d done: %w", sh, err)
	}
	if !ok || last != 1 {
		return false, nil
	}
	stable, err := s.base.withRules(l.gen, l.target(), count{})
	if err != nil {
		return true, err
	}
	s.SetLayout(stable)
	// The dropped shards' markers too: they keep redirecting producers
	// on an old count, to the stable layout.
	err = s.writeMarkers(ctx, stable, l.Existing())
	s.announceLayout(ctx, l.gen)
	return true, err
}

// AddMoved adds n to the count of tasks moved by l's change.
func (s *Store) AddMoved(ctx context.Context, l Layout, n int) error {
	return layoutScript.Run(ctx, s.rdb, []string{s.k.Record()}, "moved", l.gen, n).Err()
}

// layoutFromError returns the layout an ErrLayoutChanged reply carries:
// "LAYOUT gen shards from".
func (s *Store) layoutFromError(err error) (Layout, bool) {
	if err == nil || !redis.HasErrorPrefix(err, "LAYOUT") {
		return Layout{}, false
	}
	f := strings.Fields(strings.TrimPrefix(err.Error(), "LAYOUT"))
	if len(f) != 3 {
		return Layout{}, false
	}
	g, e1 := strconv.ParseInt(f[0], 10, 64)
	to, e2 := parseCount(f[1])
	from, e3 := parseCount(f[2])
	if e1 != nil || e2 != nil || e3 != nil {
		return Layout{}, false
	}
	l, werr := s.base.withRules(g, to, from)
	return l, werr == nil
}
