package shard

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hourglass-sched/hourglass/internal/errtext"
)

// The reshard's steps (docs/resharding.md): an old shard's owner scans
// its task ids (ScanIDs), takes those whose shard changed out of the
// shard (Export, to the outbox), stores them in their new shards
// (Import), then drops their outbox entries (Commit). Each step is one
// script on one shard, so it works on a Redis Cluster; a crash between
// steps leaves the tasks in the outbox, which the next owner resumes
// (Outbox). Import remembers what it imported during the change, so a
// repeated import stores nothing twice.

// Exported is a task Export took out of its shard: its id and its outbox
// entry (placement, data, dead record and last error, packed).
type Exported struct {
	ID    string
	Entry string
}

// ExportResult is what Export did with the ids it was given.
type ExportResult struct {
	// Tasks were taken out, to be imported.
	Tasks []Exported
	// Stayed counts tasks in flight (ready, popped, leased) or due within
	// the margin: they run in this shard.
	Stayed int
	// StayedBy counts them by queue and why they stayed.
	StayedBy map[Stay]int
	// Gone counts ids without data (finished meanwhile).
	Gone int
}

// Stay is why tasks of a queue stayed in their old shard (ExportResult).
type Stay struct {
	Queue string
	// Why is StayReady, StayLeased or StaySoon.
	Why string
}

// Why a task stays in its old shard while the shard count changes.
const (
	// StayReady: in its ready list, or popped by a worker (pending).
	StayReady = "ready"
	// StayLeased: leased by a worker that runs it.
	StayLeased = "leased"
	// StaySoon: due within the margin.
	StaySoon = "due soon"
)

// ScanIDs returns one HSCAN step of shard sh's task ids from cursor, and
// the next cursor (0 at the end).
func (s *Store) ScanIDs(ctx context.Context, sh int, cursor uint64, count int) ([]string, uint64, error) {
	v, err := scanIDsScript.Run(ctx, s.rdb, []string{s.k.Tasks(sh)}, strconv.FormatUint(cursor, 10), count).StringSlice()
	if err != nil {
		return nil, 0, errtext.Errorf("scan task ids of shard %d: %w", sh, err)
	}
	if len(v) == 0 {
		return nil, 0, errtext.Errorf("scan task ids of shard %d: empty reply", sh)
	}
	next, err := strconv.ParseUint(v[0], 10, 64)
	if err != nil {
		return nil, 0, errtext.Errorf("scan task ids of shard %d: cursor %q", sh, v[0])
	}
	return v[1:], next, nil
}

// ScanDead returns one ZSCAN step of shard sh's dead-letter ids from
// cursor, and the next cursor (0 at the end). The reshard reads them for
// the dead letters without data (the mover buries a delayed-set member
// whose data is gone), which ScanIDs does not see.
func (s *Store) ScanDead(ctx context.Context, sh int, cursor uint64, count int) ([]string, uint64, error) {
	kv, next, err := s.rdb.ZScan(ctx, s.k.Dead(sh), cursor, "", int64(count)).Result()
	if err != nil {
		return nil, 0, errtext.Errorf("scan the dead letters of shard %d: %w", sh, err)
	}
	ids := make([]string, 0, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		ids = append(ids, kv[i])
	}
	return ids, next, nil
}

// Export takes the tasks ids of shard sh out of it, to the outbox: those
// scheduled (delayed set or far tier) at least margin ahead, and the dead
// ones (with or without data), for l's change. Fenced by epoch (ErrStaleEpoch) and by the
// shard's marker, which must be l's (ErrStaleLayout: a later change
// began).
func (s *Store) Export(ctx context.Context, l Layout, sh int, epoch int64, margin time.Duration, ids []string) (ExportResult, error) {
	var r ExportResult
	if len(ids) == 0 {
		return r, nil
	}
	args := make([]any, 0, 4+len(ids))
	args = append(args, epoch, margin.Milliseconds(), s.k.PendingPrefix(sh), markerValue(l))
	for _, id := range ids {
		args = append(args, id)
	}
	v, err := exportScript.Run(ctx, s.rdb, []string{
		s.k.Delayed(sh), s.k.Tasks(sh), s.k.Inflight(sh), s.k.Dead(sh), s.k.DeadInfo(sh),
		s.k.Errors(sh), s.k.Counts(sh), s.k.Outbox(sh), s.k.Epoch(sh), s.k.Stats(sh), s.k.Marker(sh),
	}, args...).Slice()
	if err != nil {
		return r, errtext.Errorf("export from shard %d: %w", sh, err)
	}
	switch code, _ := v[0].(int64); code {
	case -10:
		return r, fmt.Errorf("%w: export from shard %d with epoch %d", ErrStaleEpoch, sh, epoch)
	case -11:
		return r, fmt.Errorf("%w: export from shard %d for generation %d", ErrStaleLayout, sh, l.Gen())
	}
	if len(v) != 1+len(ids) {
		return r, errtext.Errorf("export from shard %d: %d replies for %d ids", sh, len(v)-1, len(ids))
	}
	for i, id := range ids {
		e, _ := v[1+i].(string)
		why, queue, stayed := strings.Cut(e, "|")
		switch {
		case e == "":
			r.Gone++
		case stayed && len(why) == 2 && why[0] == 's':
			r.Stayed++
			if r.StayedBy == nil {
				r.StayedBy = map[Stay]int{}
			}
			r.StayedBy[Stay{Queue: queue, Why: map[byte]string{'l': StayLeased, 'r': StayReady, 'm': StaySoon}[why[1]]}]++
		default:
			r.Tasks = append(r.Tasks, Exported{ID: id, Entry: e})
		}
	}
	return r, nil
}

// ReadyEntry is one entry of a ready list as ReadyWindow read it: its
// index in the list, the entry as stored, and its task's id and due time
// (zero when the entry does not carry its task).
type ReadyEntry struct {
	Index int64
	Raw   string
	ID    string
	Due   time.Time
}

// ReadyWindow returns up to n entries of queue's ready list in shard sh,
// from index start (0: the head, the task that has waited longest).
// Read-only.
func (s *Store) ReadyWindow(ctx context.Context, sh int, queue string, start int64, n int) ([]ReadyEntry, error) {
	return s.ListWindow(ctx, sh, s.k.Ready(sh, queue), start, n)
}

// ListWindow returns up to n entries of list, a list of ready entries in
// shard sh (a ready list, or a fair queue's key's list: WaitingLists),
// from index start. Read-only.
func (s *Store) ListWindow(ctx context.Context, sh int, list string, start int64, n int) ([]ReadyEntry, error) {
	v, err := s.rdb.LRange(ctx, list, start, start+int64(n)-1).Result()
	if err != nil {
		return nil, errtext.Errorf("read %s: %w", list, err)
	}
	out := make([]ReadyEntry, len(v))
	for i, raw := range v {
		out[i] = ReadyEntry{Index: start + int64(i), Raw: raw}
		f := strings.SplitN(raw, "|", 3)
		if len(f) >= 2 {
			out[i].ID = f[1]
		}
		if len(f) == 3 {
			if t, err := s.DecodeIn(sh, out[i].ID, []byte(f[2])); err == nil {
				out[i].Due = t.Due
			}
		}
	}
	return out, nil
}

// ExportReady takes the given entries of queue's ready list in shard sh
// out to the outbox, for l's change (exportready.lua): ready tasks that
// wait for a worker nobody runs (a paused queue, or none serves it), so
// that the shard can be done. Each is imported (Import) as a task due at
// its due time, which its new shard's mover makes ready again. An entry
// that is no longer where it was read (a worker popped it, it moved) is
// left. Fenced by epoch (ErrStaleEpoch) and by the shard's marker
// (ErrStaleLayout).
func (s *Store) ExportReady(ctx context.Context, l Layout, sh int, epoch int64, queue string, entries []ReadyEntry) ([]Exported, error) {
	return s.ExportWaiting(ctx, l, sh, epoch, queue, s.k.Ready(sh, queue), entries)
}

// ExportWaiting is ExportReady for entries read from list (ListWindow):
// queue's ready list, or a list of its keys' waiting tasks
// (WaitingLists).
func (s *Store) ExportWaiting(ctx context.Context, l Layout, sh int, epoch int64, queue, list string, entries []ReadyEntry) ([]Exported, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	args := make([]any, 0, 2+2*len(entries))
	args = append(args, epoch, markerValue(l))
	for _, e := range entries {
		args = append(args, e.Index, e.Raw)
	}
	v, err := exportReadyScript.Run(ctx, s.rdb, []string{
		list, s.k.Pending(sh, queue), s.k.Tasks(sh), s.k.Errors(sh), s.k.Outbox(sh),
		s.k.Epoch(sh), s.k.Stats(sh), s.k.Marker(sh),
	}, args...).Slice()
	if err != nil {
		return nil, errtext.Errorf("export ready tasks of queue %q from shard %d: %w", queue, sh, err)
	}
	switch code, _ := v[0].(int64); code {
	case -10:
		return nil, fmt.Errorf("%w: export ready tasks from shard %d with epoch %d", ErrStaleEpoch, sh, epoch)
	case -11:
		return nil, fmt.Errorf("%w: export ready tasks from shard %d for generation %d", ErrStaleLayout, sh, l.Gen())
	}
	var out []Exported
	for i, e := range entries {
		if i+1 < len(v) {
			if packed, _ := v[i+1].(string); packed != "" {
				out = append(out, Exported{ID: e.ID, Entry: packed})
			}
		}
	}
	return out, nil
}

// Outbox returns the tasks shard sh exported and has not committed: a
// batch an owner left unfinished.
func (s *Store) Outbox(ctx context.Context, sh int) ([]Exported, error) {
	return s.exported(ctx, s.k.Outbox(sh))
}

// exported reads a hash of outbox entries.
func (s *Store) exported(ctx context.Context, key string) ([]Exported, error) {
	m, err := s.rdb.HGetAll(ctx, key).Result()
	if err != nil {
		return nil, errtext.Errorf("read %s: %w", key, err)
	}
	out := make([]Exported, 0, len(m))
	for id, e := range m {
		out = append(out, Exported{ID: id, Entry: e})
	}
	return out, nil
}

// Import stores exported tasks in shard sh as they were, each once per
// change (l's generation); it returns how many it stored. The shard's
// marker must be l's (ErrStaleLayout: a later change began, which may
// have dropped the shard).
func (s *Store) Import(ctx context.Context, l Layout, sh int, tasks []Exported) (int, error) {
	if len(tasks) == 0 {
		return 0, nil
	}
	args := make([]any, 0, 2+2*len(tasks))
	args = append(args, s.k.WakeChannel(sh), markerValue(l))
	for _, t := range tasks {
		args = append(args, t.ID, t.Entry)
	}
	v, err := importScript.Run(ctx, s.rdb, []string{
		s.k.Delayed(sh), s.k.Tasks(sh), s.k.Queues(sh), s.k.Far(sh), s.k.Counts(sh),
		s.k.Dead(sh), s.k.DeadInfo(sh), s.k.Errors(sh), s.k.Imported(sh, l.Gen()), s.k.Marker(sh),
	}, args...).Int64Slice()
	if err != nil {
		return 0, errtext.Errorf("import into shard %d: %w", sh, err)
	}
	if v[0] == -11 {
		return 0, fmt.Errorf("%w: import into shard %d for generation %d", ErrStaleLayout, sh, l.Gen())
	}
	return int(v[0]), nil
}

// Commit drops the outbox entries of ids in shard sh once they are
// imported. It returns the ids that were cancelled on their way
// (cancel.lua moved their entries aside): the caller removes their
// imported copies (Unimport), then forgets them (Forget). An id whose
// entry an earlier commit dropped is neither. Fenced by epoch:
// ErrStaleEpoch.
func (s *Store) Commit(ctx context.Context, sh int, epoch int64, ids []string) (cancelled []string, err error) {
	if len(ids) == 0 {
		return nil, nil
	}
	args := make([]any, 0, 1+len(ids))
	args = append(args, epoch)
	for _, id := range ids {
		args = append(args, id)
	}
	v, err := commitScript.Run(ctx, s.rdb, []string{s.k.Outbox(sh), s.k.Epoch(sh), s.k.Stats(sh), s.k.Cancelled(sh)}, args...).Int64Slice()
	if err != nil {
		return nil, errtext.Errorf("commit the exports of shard %d: %w", sh, err)
	}
	if v[0] == -10 {
		return nil, fmt.Errorf("%w: commit in shard %d with epoch %d", ErrStaleEpoch, sh, epoch)
	}
	for i, id := range ids {
		if i+1 < len(v) && v[i+1] == 2 {
			cancelled = append(cancelled, id)
		}
	}
	return cancelled, nil
}

// CancelledOnTheWay returns the outbox entries of shard sh that were
// cancelled on their way and not forgotten yet: left by an owner that
// died before it removed their imported copies.
func (s *Store) CancelledOnTheWay(ctx context.Context, sh int) ([]Exported, error) {
	return s.exported(ctx, s.k.Cancelled(sh))
}

// Forget drops the cancelled entries of ids in shard sh, once their
// imported copies are removed.
func (s *Store) Forget(ctx context.Context, sh int, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	if err := s.rdb.HDel(ctx, s.k.Cancelled(sh), ids...).Err(); err != nil {
		return errtext.Errorf("forget the cancelled exports of shard %d: %w", sh, err)
	}
	return nil
}

// Unimport removes from shard sh the imported copies of tasks that were
// cancelled on their way, if they are still as imported, and records
// their ids as imported in l's change, so that a late import of the same
// entries (an owner paused before its import) stores nothing.
func (s *Store) Unimport(ctx context.Context, l Layout, sh int, tasks []Exported) error {
	if len(tasks) == 0 {
		return nil
	}
	args := make([]any, 0, 1+2*len(tasks))
	args = append(args, s.k.PendingPrefix(sh))
	for _, t := range tasks {
		args = append(args, t.ID, t.Entry)
	}
	err := unimportScript.Run(ctx, s.rdb, []string{
		s.k.Delayed(sh), s.k.Tasks(sh), s.k.Counts(sh), s.k.Dead(sh), s.k.DeadInfo(sh), s.k.Errors(sh), s.k.Inflight(sh),
		s.k.Imported(sh, l.Gen()),
	}, args...).Err()
	if err != nil {
		return errtext.Errorf("unimport from shard %d: %w", sh, err)
	}
	return nil
}

// ShardEmpty reports whether shard sh holds no task and no outbox entry.
func (s *Store) ShardEmpty(ctx context.Context, sh int) (bool, error) {
	n, err := s.rdb.Exists(ctx, s.k.Tasks(sh)).Result()
	if err != nil {
		return false, errtext.Errorf("is shard %d empty: %w", sh, err)
	}
	m, err := s.rdb.Exists(ctx, s.k.Outbox(sh)).Result()
	if err != nil {
		return false, errtext.Errorf("is shard %d empty: %w", sh, err)
	}
	return n == 0 && m == 0, nil
}

// DropShard deletes the keys of shard sh, which a shrink left without
// tasks (ShardEmpty): everything but its layout marker, which keeps
// redirecting producers on an old layout, its epoch, and its periodic
// schedules' hand-over marks (HandOff), which their new homes read until
// the change ends.
func (s *Store) DropShard(ctx context.Context, sh int) error {
	keys := []string{
		s.k.Delayed(sh), s.k.Tasks(sh), s.k.Inflight(sh), s.k.Dead(sh), s.k.DeadInfo(sh), s.k.Errors(sh),
		s.k.Counts(sh), s.k.Outbox(sh), s.k.Cancelled(sh), s.k.Leases(sh), s.k.Seq(sh), s.k.Queues(sh), s.k.Stats(sh),
		s.k.ReadyQueues(sh),
	}
	buckets, err := s.rdb.ZRange(ctx, s.k.Far(sh), 0, -1).Result()
	if err != nil {
		return errtext.Errorf("drop shard %d: %w", sh, err)
	}
	for _, b := range buckets {
		keys = append(keys, s.k.FarBucket(sh, b))
	}
	queues, err := s.rdb.SMembers(ctx, s.k.ReadyQueues(sh)).Result()
	if err != nil {
		return errtext.Errorf("drop shard %d: %w", sh, err)
	}
	for _, q := range queues {
		keys = append(keys, s.k.Ready(sh, q), s.k.Pending(sh, q))
		fair, err := s.fairKeys(ctx, sh, q)
		if err != nil {
			return errtext.Errorf("drop shard %d: %w", sh, err)
		}
		keys = append(keys, fair...)
	}
	keys = append(keys, s.k.Far(sh))
	pipe := s.rdb.Pipeline()
	for _, k := range keys {
		pipe.Del(ctx, k) // one key per command: a Redis Cluster node serves them all, but one DEL may not span them
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return errtext.Errorf("drop shard %d: %w", sh, err)
	}
	return nil
}
