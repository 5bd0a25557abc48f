package shard

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hourglass-sched/hourglass/internal/errtext"
)

// Listings and dead-letter operations, a bounded page per call.

// MaxPage bounds the entries one listing or dead-letter call examines.
const MaxPage = 1000

// PagePreview is how many bytes of each task's payload a listing returns
// (PageSet, PageFar, PageReady): the scripts cut the rest, so a page's
// reply is bounded by MaxPage small entries whatever the payloads (a page
// of 50 dead letters of 1 MiB was a 56 MB reply). Lookup returns the
// whole payload of one task.
const PagePreview = 256

// SetKind names a sorted set of tasks that PageSet lists.
type SetKind int

// The sorted sets of a shard that PageSet lists.
const (
	SetDelayed  SetKind = iota // scheduled tasks, by due time
	SetInflight                // leased tasks, by lease deadline
	SetDead                    // dead letters, by burial time
)

// Cursor is where a page of a sorted set ends: the score and member of the
// last entry examined ("" score: the start).
type Cursor struct {
	Score  string `json:"s,omitempty"`
	Member string `json:"m,omitempty"`
}

// Filter selects entries of a page: Queue ("" any), a score range (Min
// and Max inclusive unix ms; 0 for no bound), and for dead letters Reason
// (exact) and ErrorContains (substring of the last error).
type Filter struct {
	Queue         string
	Min, Max      int64
	Reason        string
	ErrorContains string
	// Desc pages from the highest score down, ties in reverse id order
	// (page.lua's "desc"): the cursor is then the last entry examined
	// going down.
	Desc bool
}

func (f Filter) bounds() (string, string) {
	lo, hi := "-inf", "+inf"
	if f.Min > 0 {
		lo = strconv.FormatInt(f.Min, 10)
	}
	if f.Max > 0 {
		hi = strconv.FormatInt(f.Max, 10)
	}
	return lo, hi
}

// Entry is one listed task: its id, the set's score (due time, lease
// deadline or burial time, unix ms; 0 where none), its encoded data
// ("" if none) with at most PagePreview bytes of payload, the payload's
// whole length, its dead-letter record and last error.
type Entry struct {
	ID    string
	Score int64
	Blob  string
	// PayloadSize is the length of the whole payload in bytes; -1 when
	// there is no data or it is in neither encoding (Blob then holds
	// its first 1024 bytes).
	PayloadSize int64
	DeadInfo    string
	LastError   string
	Seq         int64 // ready entries: the entry's sequence number
	// BadScore is set for a delayed-set entry whose score is not a due
	// time (ValidDue); Score is then 0.
	BadScore bool
	// names reads interned queue names (task data version 2): the
	// store's that listed the entry.
	names QueueNameFunc
}

// PageSet returns the entries of one of shard sh's sorted sets after cur
// that match f, examining at most limit (1..MaxPage) entries, the next
// cursor and whether the set is exhausted.
func (s *Store) PageSet(ctx context.Context, sh int, kind SetKind, cur Cursor, limit int, f Filter) ([]Entry, Cursor, bool, error) {
	key := map[SetKind]string{SetDelayed: s.k.Delayed(sh), SetInflight: s.k.Inflight(sh), SetDead: s.k.Dead(sh)}[kind]
	if key == "" || limit < 1 || limit > MaxPage {
		return nil, cur, false, fmt.Errorf("%w: page of set %d with limit %d", ErrInvalidArgument, kind, limit)
	}
	lo, hi := f.bounds()
	v, err := pageScript.Run(ctx, s.rdb, []string{key, s.k.Tasks(sh), s.k.DeadInfo(sh), s.k.Errors(sh)},
		cur.Score, cur.Member, limit, f.Queue, lo, hi, f.Reason, f.ErrorContains, PagePreview, map[bool]string{true: "desc"}[f.Desc]).Slice()
	if err != nil {
		return nil, cur, false, errtext.Errorf("page of shard %d: %w", sh, err)
	}
	if len(v) < 3 || (len(v)-3)%6 != 0 {
		return nil, cur, false, errtext.Errorf("page of shard %d: unexpected reply of %d values", sh, len(v))
	}
	next := Cursor{Score: str(v[0]), Member: str(v[1])}
	out := make([]Entry, 0, (len(v)-3)/6)
	for i := 3; i < len(v); i += 6 {
		size, _ := v[i+3].(int64)
		e := Entry{names: s.namesIn(sh), ID: str(v[i]), Blob: str(v[i+2]), PayloadSize: size, DeadInfo: str(v[i+4]), LastError: str(v[i+5])}
		if score, err := strconv.ParseFloat(str(v[i+1]), 64); err != nil || !ValidDue(score) {
			e.BadScore = kind == SetDelayed
		} else {
			e.Score = int64(score)
		}
		out = append(out, e)
	}
	return out, next, v[2] == int64(1), nil
}

func str(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	}
	return ""
}

// FarCursor is where a page of the far tier ends: the bucket (its
// promotion time and start) and the index of the next entry in it.
type FarCursor struct {
	Score  string `json:"s,omitempty"`
	Bucket string `json:"b,omitempty"`
	Index  int64  `json:"i,omitempty"`
}

// PageFar returns the live far-tier tasks of shard sh after cur (of queue
// q, "" any), examining at most limit entries, the next cursor and
// whether the tier is exhausted.
func (s *Store) PageFar(ctx context.Context, sh int, cur FarCursor, limit int, q string) ([]Entry, FarCursor, bool, error) {
	if limit < 1 || limit > MaxPage {
		return nil, cur, false, fmt.Errorf("%w: page limit %d", ErrInvalidArgument, limit)
	}
	v, err := pageFarScript.Run(ctx, s.rdb, []string{s.k.Far(sh), s.k.Tasks(sh), s.k.Errors(sh)},
		cur.Score, cur.Bucket, cur.Index, limit, q, PagePreview).Slice()
	if err != nil {
		return nil, cur, false, errtext.Errorf("far-tier page of shard %d: %w", sh, err)
	}
	if len(v) < 4 || (len(v)-4)%4 != 0 {
		return nil, cur, false, errtext.Errorf("far-tier page of shard %d: unexpected reply of %d values", sh, len(v))
	}
	idx, _ := v[2].(int64)
	next := FarCursor{Score: str(v[0]), Bucket: str(v[1]), Index: idx}
	out := make([]Entry, 0, (len(v)-4)/4)
	for i := 4; i < len(v); i += 4 {
		size, _ := v[i+2].(int64)
		out = append(out, Entry{names: s.namesIn(sh), ID: str(v[i]), Blob: str(v[i+1]), PayloadSize: size, LastError: str(v[i+3])})
	}
	return out, next, v[3] == int64(1), nil
}

// ReadyCursor is where a page of a ready list ends: the index of the next
// entry and the number of the last one examined.
type ReadyCursor struct {
	Index int64  `json:"i,omitempty"`
	Seq   string `json:"q,omitempty"`
}

// PageReady returns the live entries of queue's ready list in shard sh
// after cur, examining at most limit entries, the next cursor and whether
// the list is exhausted.
func (s *Store) PageReady(ctx context.Context, sh int, queue string, cur ReadyCursor, limit int) ([]Entry, ReadyCursor, bool, error) {
	if limit < 1 || limit > MaxPage || !ValidQueue(queue) {
		return nil, cur, false, fmt.Errorf("%w: ready page of queue %q, limit %d", ErrInvalidArgument, queue, limit)
	}
	v, err := pageReadyScript.Run(ctx, s.rdb,
		[]string{s.k.Ready(sh, queue), s.k.Pending(sh, queue), s.k.Tasks(sh), s.k.Errors(sh)},
		cur.Index, cur.Seq, limit, PagePreview).Slice()
	if err != nil {
		return nil, cur, false, errtext.Errorf("ready page of shard %d: %w", sh, err)
	}
	if len(v) < 3 || (len(v)-3)%5 != 0 {
		return nil, cur, false, errtext.Errorf("ready page of shard %d: unexpected reply of %d values", sh, len(v))
	}
	idx, _ := v[0].(int64)
	next := ReadyCursor{Index: idx, Seq: str(v[1])}
	out := make([]Entry, 0, (len(v)-3)/5)
	for i := 3; i < len(v); i += 5 {
		seq, _ := v[i+1].(int64)
		size, _ := v[i+3].(int64)
		out = append(out, Entry{names: s.namesIn(sh), ID: str(v[i]), Seq: seq, Blob: str(v[i+2]), PayloadSize: size, LastError: str(v[i+4])})
	}
	return out, next, v[2] == int64(1), nil
}

// DeadOp is a dead-letter operation.
type DeadOp string

// Dead-letter operations.
const (
	// Replay puts dead tasks back in the delayed set with their attempts
	// reset to 0, their dead-letter record and last error dropped.
	Replay DeadOp = "replay"
	// Purge deletes dead tasks with their data; their ids are free again.
	Purge DeadOp = "purge"
)

// DeadResult is what one dead-letter call did.
type DeadResult struct {
	Examined, Acted, Skipped int64 // Skipped: undecodable data, not replayed
	Next                     Cursor
	Done                     bool
}

// DeadOne replays (due at at; zero: now) or purges dead task id,
// wherever a change of the shard count has it (the locator's order). It
// returns ErrNotFound when id is not dead, ErrUndecodable when its data
// cannot be replayed, ErrInTransit while it is between two shards.
func (s *Store) DeadOne(ctx context.Context, op DeadOp, id string, at time.Time) error {
	if !ValidStoredID(id) {
		return fmt.Errorf("%w: task id %q", ErrInvalidArgument, id)
	}
	var r DeadResult
	err := s.find(ctx, id, func(ctx context.Context, p Place) (bool, error) {
		if p.Outbox {
			return s.inTransit(ctx, p, id)
		}
		var err error
		r, err = s.deadOps(ctx, p.Shard, op, id, at, Cursor{}, 1, Filter{})
		return r.Examined > 0, err
	})
	switch {
	case errors.Is(err, ErrNotFound):
		return fmt.Errorf("%w: %q is not a dead letter", ErrNotFound, id)
	case err != nil:
		return err
	case r.Skipped > 0:
		return fmt.Errorf("%w: %q cannot be replayed", ErrUndecodable, id)
	}
	return nil
}

// DeadPage replays or purges the dead letters of shard sh after cur that
// match f, examining at most limit (1..MaxPage).
func (s *Store) DeadPage(ctx context.Context, sh int, op DeadOp, at time.Time, cur Cursor, limit int, f Filter) (DeadResult, error) {
	if limit < 1 || limit > MaxPage {
		return DeadResult{}, fmt.Errorf("%w: page limit %d", ErrInvalidArgument, limit)
	}
	return s.deadOps(ctx, sh, op, "", at, cur, limit, f)
}

func (s *Store) deadOps(ctx context.Context, sh int, op DeadOp, id string, at time.Time, cur Cursor, limit int, f Filter) (DeadResult, error) {
	if op != Replay && op != Purge {
		return DeadResult{}, fmt.Errorf("%w: dead-letter operation %q", ErrInvalidArgument, op)
	}
	due := ""
	if !at.IsZero() {
		due = strconv.FormatInt(at.UnixMilli(), 10)
	}
	lo, hi := f.bounds()
	v, err := deadOpsScript.Run(ctx, s.rdb,
		[]string{s.k.Dead(sh), s.k.DeadInfo(sh), s.k.Tasks(sh), s.k.Errors(sh), s.k.Delayed(sh), s.k.Counts(sh)},
		string(op), s.k.WakeChannel(sh), due, id, cur.Score, cur.Member, limit, f.Queue, lo, hi, f.Reason, f.ErrorContains).Slice()
	if err != nil {
		return DeadResult{}, errtext.Errorf("%s dead letters of shard %d: %w", op, sh, err)
	}
	if len(v) != 6 {
		return DeadResult{}, errtext.Errorf("%s dead letters of shard %d: unexpected reply of %d values", op, sh, len(v))
	}
	n := func(i int) int64 { x, _ := v[i].(int64); return x }
	return DeadResult{Examined: n(0), Acted: n(1), Skipped: n(2), Next: Cursor{Score: str(v[3]), Member: str(v[4])}, Done: n(5) == 1}, nil
}
