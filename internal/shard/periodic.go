package shard

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/errtext"
)

// Periodic schedules (package periodic) live in the shard of their name:
// the shard's owner fires them, and each occurrence's task is stored in
// that same shard, so that recording the occurrence and enqueueing its
// task are one atomic script call (fire.lua).

// HomeShard returns the shard of periodic schedule name.
func (l Layout) HomeShard(name string) int { return l.ShardOf(name) }

// OccurrenceID returns the task id of the occurrence at occ of schedule
// name: "<name>@<unix ms>", with "~k" appended for the smallest k >= 1
// that makes it hash to the schedule's home shard when the plain form
// does not. Every replica computes the same id.
func (l Layout) OccurrenceID(name string, occ time.Time) string {
	base := name + "@" + strconv.FormatInt(occ.UnixMilli(), 10)
	home := l.HomeShard(name)
	if l.ShardOf(base) == home {
		return base
	}
	for k := 1; ; k++ {
		if id := base + "~" + strconv.Itoa(k); l.ShardOf(id) == home {
			return id
		}
	}
}

// FireOutcome is what fire.lua did with an occurrence.
type FireOutcome int

const (
	// Fired: the occurrence's task was enqueued.
	Fired FireOutcome = iota + 1
	// FiredDuplicate: a task with the occurrence's id was live already
	// (the occurrence is recorded; nothing else changed).
	FiredDuplicate
	// AlreadyFired: the occurrence is not after the last one recorded.
	AlreadyFired
	// SkippedOverlap: the previous occurrence's task was still stored.
	SkippedOverlap
	// SkippedPaused: the schedule is paused.
	SkippedPaused
	// Refused: the enqueue was refused (Err says why: an unknown queue, a
	// payload too large); the occurrence is recorded all the same.
	Refused
	// HandedOver: the schedule's home is another shard now (the shard
	// count changed, HandOff); nothing was recorded.
	HandedOver
	// SkippedPolicy: the occurrences of FireArgs.Policy were recorded as
	// skipped by the catch-up policy.
	SkippedPolicy
)

// FireArgs describe one occurrence of a periodic schedule.
type FireArgs struct {
	Schedule   string
	Occurrence time.Time
	// Task is the occurrence's task; its ID is OccurrenceID's and its
	// Due the occurrence plus its jitter.
	Task  EnqueueArgs
	Epoch int64
	// Paused records the occurrence as skipped, without a task.
	Paused bool
	// Overlap skips the occurrence (recorded, without a task) while the
	// schedule's last task (ScheduleState.LastTask) is still stored.
	Overlap bool
	// CaughtUp marks, in the schedule's history, an occurrence fired
	// after it was missed (catch-up).
	CaughtUp bool
	// Policy, when set, records the occurrences the catch-up policy does
	// not fire, from Policy.First to Occurrence, as skipped: no task, one
	// entry of the history, and Occurrence as the last recorded.
	Policy *PolicySkip
}

// PolicySkip describes the occurrences a catch-up policy skipped
// (FireArgs.Policy).
type PolicySkip struct {
	First  time.Time
	Count  int
	Reason string
}

// FireResult is the outcome of Fire.
type FireResult struct {
	Outcome FireOutcome
	// Last is the last occurrence recorded (for AlreadyFired, the one
	// that made this call a no-op).
	Last time.Time
	// Enqueue is the enqueue's result for Fired, FiredDuplicate, Refused.
	Enqueue EnqueueResult
}

// Fire records the occurrence of a schedule whose home is shard sh
// (HomeShard) and enqueues its task in one atomic call (fire.lua): an
// occurrence is enqueued at most once, whoever fires it, also after its
// task completed and was deleted. Fenced by epoch: ErrStaleEpoch.
func (s *Store) Fire(ctx context.Context, sh int, a FireArgs) (FireResult, error) {
	if l := s.Layout(); l.HomeShard(a.Schedule) != sh || l.ShardOf(a.Task.ID) != sh {
		return FireResult{}, fmt.Errorf("%w: schedule %q and task %q must be in shard %d", ErrInvalidArgument, a.Schedule, a.Task.ID, sh)
	}
	mode := ""
	switch {
	case a.Policy != nil:
		mode = "policy"
	case a.Paused:
		mode = "paused"
	case a.Overlap:
		mode = "overlap"
		busy, err := s.lastTaskElsewhere(ctx, sh, a.Schedule)
		if err != nil {
			return FireResult{}, err
		}
		if busy {
			mode = "busy"
		}
	}
	args := append([]any{s.k.WakeChannel(sh)}, enqueueArgs(a.Task)...)
	args = append(args, a.Schedule, a.Occurrence.UnixMilli(), a.Epoch, mode, map[bool]string{true: "1"}[a.CaughtUp])
	if p := a.Policy; p != nil {
		args = append(args, p.First.UnixMilli(), p.Count, p.Reason)
	}
	v, err := fireScript.Run(ctx, s.rdb, []string{
		s.k.Delayed(sh), s.k.Tasks(sh), s.k.Queues(sh), s.k.Far(sh), s.k.Counts(sh),
		s.k.Periodic(sh), s.k.Epoch(sh), s.k.Stats(sh), s.k.ScheduleHistory(sh, a.Schedule),
	}, args...).Slice()
	if err != nil {
		return FireResult{}, errtext.Errorf("fire %q at %d: %w", a.Schedule, a.Occurrence.UnixMilli(), err)
	}
	if len(v) != 3 {
		return FireResult{}, errtext.Errorf("fire %q: unexpected reply of %d values", a.Schedule, len(v))
	}
	code, _ := v[0].(int64)
	at, _ := v[1].(int64)
	occ := a.Occurrence.Truncate(time.Millisecond)
	switch code {
	case -10:
		return FireResult{}, fmt.Errorf("%w: fire %q with epoch %d, stored %d", ErrStaleEpoch, a.Schedule, a.Epoch, at)
	case 5:
		return FireResult{Outcome: AlreadyFired, Last: time.UnixMilli(at)}, nil
	case 6:
		return FireResult{Outcome: SkippedOverlap, Last: occ}, nil
	case 7:
		return FireResult{Outcome: SkippedPaused, Last: occ}, nil
	case 8:
		return FireResult{Outcome: HandedOver}, nil
	case 9:
		return FireResult{Outcome: SkippedPolicy, Last: occ}, nil
	}
	r := parseEnqueue(a.Task, v)
	switch {
	case r.Err == nil:
		return FireResult{Outcome: Fired, Last: occ, Enqueue: r}, nil
	case errors.Is(r.Err, ErrDuplicate):
		return FireResult{Outcome: FiredDuplicate, Last: occ, Enqueue: r}, nil
	default:
		return FireResult{Outcome: Refused, Last: occ, Enqueue: r}, nil
	}
}

// lastTaskElsewhere reports whether schedule name's last task (the one
// overlap skip waits for) is stored outside home shard sh, where fire.lua
// cannot see it: after a change of the shard count it may have moved, or
// been placed by another count. The locator visits the task's homes other
// than sh. Before any change every occurrence id's home is sh
// (OccurrenceID), so this costs nothing then.
func (s *Store) lastTaskElsewhere(ctx context.Context, sh int, name string) (bool, error) {
	if s.Layout().Gen() == 0 {
		return false, nil
	}
	id, err := s.rdb.HGet(ctx, s.k.Periodic(sh), name+"|task").Result()
	if errors.Is(err, redis.Nil) || id == "" {
		return false, nil
	}
	if err != nil {
		return false, errtext.Errorf("last task of schedule %q: %w", name, err)
	}
	if h := s.Layout().Homes(id); !h.Moving() && h.New == sh {
		return false, nil
	}
	err = s.find(ctx, id, func(ctx context.Context, p Place) (bool, error) {
		if p.Shard == sh && !p.Outbox {
			return false, nil // fire.lua looks there
		}
		return s.existsIn(ctx, p, id)
	})
	switch {
	case errors.Is(err, ErrNotFound):
		return false, nil
	case errors.Is(err, ErrInTransit):
		return true, nil
	case err != nil:
		return false, errtext.Errorf("find the last task of schedule %q: %w", name, err)
	}
	return true, nil
}

// ScheduleState is what a shard records of a periodic schedule.
type ScheduleState struct {
	// Last is the last occurrence fired or skipped (zero: none).
	Last time.Time
	// LastTask is the id of the last task the schedule enqueued ("":
	// none), which overlap skip waits for.
	LastTask string
	// Fired is the last occurrence whose task was stored (enqueued, or
	// found live): not one skipped (paused, overlap, the catch-up
	// policy) nor refused. Zero: none.
	Fired time.Time
	// Moved is set once the schedule was handed over to another home
	// shard (HandOff): this shard no longer fires it.
	Moved bool
}

// HandOff marks the schedules names of shard sh as handed over to their
// new home in l's change (handoff.lua; fire.lua refuses them here from
// then on) and returns what sh recorded of each. Fenced by epoch
// (ErrStaleEpoch) unless epoch is 0 (the new home's owner, which needs no
// fence: the mark is atomic with fire.lua's check), and by the shard's
// marker, which must be l's (ErrStaleLayout).
func (s *Store) HandOff(ctx context.Context, l Layout, sh int, epoch int64, names []string) (map[string]ScheduleState, error) {
	if len(names) == 0 {
		return nil, nil
	}
	ep := ""
	if epoch != 0 {
		ep = strconv.FormatInt(epoch, 10)
	}
	args := make([]any, 0, 2+len(names))
	args = append(args, ep, markerValue(l))
	for _, n := range names {
		args = append(args, n)
	}
	v, err := handoffScript.Run(ctx, s.rdb, []string{s.k.Periodic(sh), s.k.Epoch(sh), s.k.Stats(sh), s.k.Marker(sh)}, args...).Slice()
	if err != nil {
		return nil, errtext.Errorf("hand schedules over from shard %d: %w", sh, err)
	}
	switch code, _ := v[0].(int64); code {
	case -10:
		return nil, fmt.Errorf("%w: hand over from shard %d with epoch %d", ErrStaleEpoch, sh, epoch)
	case -11:
		return nil, fmt.Errorf("%w: hand over from shard %d for generation %d", ErrStaleLayout, sh, l.Gen())
	}
	if len(v) != 1+3*len(names) {
		return nil, errtext.Errorf("hand over from shard %d: %d values for %d schedules", sh, len(v)-1, len(names))
	}
	out := make(map[string]ScheduleState, len(names))
	for i, n := range names {
		last, _ := v[1+3*i].(string)
		task, _ := v[2+3*i].(string)
		fired, _ := v[3+3*i].(string)
		out[n] = ScheduleState{Last: unixMs(last), LastTask: task, Fired: unixMs(fired), Moved: true}
	}
	return out, nil
}

// Adopt takes handed-over schedules into their new home, shard sh: each
// one's last occurrence becomes the given one if that is later than what
// sh records (adopt.lua).
func (s *Store) Adopt(ctx context.Context, sh int, states map[string]ScheduleState) error {
	if len(states) == 0 {
		return nil
	}
	ms := func(t time.Time) int64 {
		if t.IsZero() {
			return 0
		}
		return t.UnixMilli()
	}
	args := make([]any, 0, 4*len(states))
	for n, st := range states {
		args = append(args, n, ms(st.Last), st.LastTask, ms(st.Fired))
	}
	if err := adoptScript.Run(ctx, s.rdb, []string{s.k.Periodic(sh)}, args...).Err(); err != nil {
		return errtext.Errorf("adopt schedules in shard %d: %w", sh, err)
	}
	return nil
}

// PeriodicState returns what shard sh records of each schedule whose
// home it is.
func (s *Store) PeriodicState(ctx context.Context, sh int) (map[string]ScheduleState, error) {
	m, err := s.rdb.HGetAll(ctx, s.k.Periodic(sh)).Result()
	if err != nil {
		return nil, errtext.Errorf("periodic state of shard %d: %w", sh, err)
	}
	out := make(map[string]ScheduleState, len(m))
	for field, v := range m {
		name, kind, _ := strings.Cut(field, "|")
		st := out[name]
		switch kind {
		case "task":
			st.LastTask = v
		case "fired":
			st.Fired = unixMs(v)
		case "":
			v, st.Moved = strings.CutPrefix(v, "moved:")
			st.Last = unixMs(v)
		default:
			continue // a field of a later version
		}
		out[name] = st
	}
	return out, nil
}

// unixMs parses a recorded unix-ms time; zero for none or garbage.
func unixMs(v string) time.Time {
	if ms, err := strconv.ParseInt(v, 10, 64); err == nil && ms > 0 {
		return time.UnixMilli(ms)
	}
	return time.Time{}
}

// RecordedSchedules returns the names of the schedules shards 0..Existing-1
// record a state for (fired, skipped or handed over), sorted: one
// pipelined HKEYS per shard.
func (s *Store) RecordedSchedules(ctx context.Context) ([]string, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringSliceCmd, s.Layout().Existing())
	for sh := range cmds {
		cmds[sh] = pipe.HKeys(ctx, s.k.Periodic(sh))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, errtext.Errorf("recorded schedules: %w", err)
	}
	seen := map[string]bool{}
	for _, c := range cmds {
		for _, f := range c.Val() {
			name, _, _ := strings.Cut(f, "|")
			seen[name] = true
		}
	}
	return slices.Sorted(maps.Keys(seen)), nil
}

// LastRecorded returns the last occurrence recorded (fired or skipped) of
// each schedule whose home is shard sh.
func (s *Store) LastRecorded(ctx context.Context, sh int) (map[string]time.Time, error) {
	st, err := s.PeriodicState(ctx, sh)
	if err != nil {
		return nil, err
	}
	out := make(map[string]time.Time, len(st))
	for name, v := range st {
		if !v.Last.IsZero() {
			out[name] = v.Last
		}
	}
	return out, nil
}

// PauseSchedule pauses (or, with paused false, resumes) periodic schedule
// name: the owner of its shard records each occurrence while it is paused
// as skipped, without a task. It reports whether anything changed.
func (s *Store) PauseSchedule(ctx context.Context, name string, paused bool) (bool, error) {
	var changed bool
	var err error
	if paused {
		changed, err = s.rdb.HSetNX(ctx, s.k.PausedSchedules(), name, time.Now().UnixMilli()).Result()
	} else {
		var n int64
		n, err = s.rdb.HDel(ctx, s.k.PausedSchedules(), name).Result()
		changed = n > 0
	}
	if err != nil {
		return false, errtext.Errorf("pause schedule %q: %w", name, err)
	}
	return changed, nil
}

// PausedSchedules returns the paused schedules and when each was paused.
func (s *Store) PausedSchedules(ctx context.Context) (map[string]time.Time, error) {
	m, err := s.rdb.HGetAll(ctx, s.k.PausedSchedules()).Result()
	if err != nil {
		return nil, errtext.Errorf("paused schedules: %w", err)
	}
	out := make(map[string]time.Time, len(m))
	for name, v := range m {
		ms, _ := strconv.ParseInt(v, 10, 64)
		out[name] = time.UnixMilli(ms)
	}
	return out, nil
}

// SchedulesChanged is the message announced on the control channel when
// a schedule is registered or removed at run time; schedulers re-read
// ScheduleDefs when they hear it.
const SchedulesChanged = "schedules"

// PutScheduleDef registers (or replaces) schedule name, def being its
// JSON, and announces the change.
func (s *Store) PutScheduleDef(ctx context.Context, name string, def []byte) error {
	if err := s.rdb.HSet(ctx, s.k.ScheduleDefs(), name, def).Err(); err != nil {
		return errtext.Errorf("register schedule %q: %w", name, err)
	}
	s.announceSchedules(ctx)
	return nil
}

// DeleteScheduleDef removes schedule name from the run-time registry and
// reports whether it was there.
func (s *Store) DeleteScheduleDef(ctx context.Context, name string) (bool, error) {
	n, err := s.rdb.HDel(ctx, s.k.ScheduleDefs(), name).Result()
	if err != nil {
		return false, errtext.Errorf("remove schedule %q: %w", name, err)
	}
	s.announceSchedules(ctx)
	return n > 0, nil
}

// announceSchedules tells the schedulers to re-read the registry. Best
// effort: they also re-read it every few seconds.
func (s *Store) announceSchedules(ctx context.Context) {
	_ = s.rdb.Publish(ctx, s.k.ControlChannel(), SchedulesChanged).Err()
}

// ScheduleDefs returns the schedules registered at run time, as JSON by
// name.
func (s *Store) ScheduleDefs(ctx context.Context) (map[string][]byte, error) {
	m, err := s.rdb.HGetAll(ctx, s.k.ScheduleDefs()).Result()
	if err != nil {
		return nil, errtext.Errorf("registered schedules: %w", err)
	}
	out := make(map[string][]byte, len(m))
	for k, v := range m {
		out[k] = []byte(v)
	}
	return out, nil
}
