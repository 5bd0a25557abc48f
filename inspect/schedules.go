package inspect

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"time"

	"github.com/hourglass-sched/hourglass/periodic"
)

// MaxNext bounds the occurrences Schedules computes per schedule.
const MaxNext = 100

// ScheduleInfo describes one periodic schedule: its definition as the
// caller gave it, and its state in Redis.
type ScheduleInfo struct {
	Name  string `json:"name"`
	Queue string `json:"queue"`
	// Spec is the cron expression, or "every <interval>".
	Spec string `json:"spec"`
	// TimeZone of a cron schedule ("UTC" by default); "" for an
	// interval, which counts from the Unix epoch in no zone.
	TimeZone string           `json:"time_zone,omitempty"`
	CatchUp  periodic.CatchUp `json:"catch_up"`
	Overlap  periodic.Overlap `json:"overlap"`
	// Shard is the schedule's home shard: its owner fires it. It is the
	// shard of its name by the layout record's count (the new count while
	// the count changes, as the schedulers place it).
	Shard int `json:"shard"`
	// LastFired is the last occurrence whose task was enqueued (zero if
	// none was): not one skipped while paused, by overlap skip or by the
	// catch-up policy, nor one whose enqueue was refused. While the shard
	// count changes and the schedule's home moves, the later of what its
	// old and new homes record.
	LastFired time.Time `json:"last_fired,omitzero"`
	// LastRecorded is the last occurrence recorded, fired or skipped: the
	// next occurrence comes after it.
	LastRecorded time.Time `json:"last_recorded,omitzero"`
	// Paused, and since when.
	Paused   bool      `json:"paused"`
	PausedAt time.Time `json:"paused_at,omitzero"`
	// Next are the next occurrences after the now Schedules was given
	// and after the last one recorded (fired a little ahead).
	Next []time.Time `json:"next"`
}

// Schedules returns the state of the schedules defs (those of the
// caller's configuration, which is the schedulers' too), in the order
// given: the last occurrence recorded (wherever a change of the shard
// count has it, read with one call per distinct home shard), whether it
// is paused, and its next occurrences after now
// (next of them, at most MaxNext). Schedules paused or recorded in Redis
// but not in defs are left out: only defs say what a schedule is.
func (i *Inspector) Schedules(ctx context.Context, defs []*periodic.Compiled, now time.Time, next int) ([]ScheduleInfo, error) {
	if next < 0 || next > MaxNext {
		return nil, fmt.Errorf("%w: %d next occurrences: want 0..%d", ErrInvalidArgument, next, MaxNext)
	}
	l, err := i.layout(ctx)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(defs))
	for k, d := range defs {
		names[k] = d.Name
	}
	last, err := i.store.LastOccurrences(ctx, names)
	if err != nil {
		return nil, err
	}
	paused, err := i.store.PausedSchedules(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]ScheduleInfo, 0, len(defs))
	for _, d := range defs {
		sh := l.HomeShard(d.Name)
		s := ScheduleInfo{Name: d.Name, Queue: d.Queue, Spec: d.Cron, TimeZone: d.TimeZone,
			CatchUp: d.CatchUp, Overlap: d.Overlap, Shard: sh, Next: []time.Time{}}
		s.LastFired, s.LastRecorded = last[d.Name].Fired, last[d.Name].Last
		if d.Interval > 0 {
			s.Spec = "every " + d.Interval.String()
		} else if s.TimeZone == "" {
			s.TimeZone = "UTC"
		}
		if at, ok := paused[d.Name]; ok {
			s.Paused, s.PausedAt = true, at
		}
		// An occurrence is fired up to fire.Lead before it: one recorded
		// already is not next.
		t := now
		if s.LastRecorded.After(t) {
			t = s.LastRecorded
		}
		for len(s.Next) < next {
			if t = d.Next(t); t.IsZero() {
				break // the expression never occurs again
			}
			s.Next = append(s.Next, t)
		}
		out = append(out, s)
	}
	return out, nil
}

var scheduleName = regexp.MustCompile(periodic.NameRule)

// PauseSchedule pauses periodic schedule name cluster-wide: the owner of
// its shard records each occurrence while it is paused as skipped,
// without a task (catch-up does not bring them back on resume).
// Idempotent, as Pause is for queues. ErrInvalidArgument for a name that
// no schedule can have (periodic.NameRule); whether a schedule of that
// name is configured is the caller's to check (the schedulers'
// configuration says, not Redis).
func (i *Inspector) PauseSchedule(ctx context.Context, name string) error {
	return i.pauseSchedule(ctx, name, true)
}

// ResumeSchedule resumes a paused schedule: its next occurrence fires.
// Idempotent.
func (i *Inspector) ResumeSchedule(ctx context.Context, name string) error {
	return i.pauseSchedule(ctx, name, false)
}

func (i *Inspector) pauseSchedule(ctx context.Context, name string, paused bool) error {
	if !scheduleName.MatchString(name) {
		return fmt.Errorf("%w: schedule name %q must match %s", ErrInvalidArgument, name, periodic.NameRule)
	}
	_, err := i.store.PauseSchedule(ctx, name, paused)
	return mapErr(err)
}

// SetSchedule registers periodic schedule s at run time (or replaces the
// one of that name registered so): the schedulers read the registry when
// the change is announced and every few seconds, and the owner of the
// schedule's shard fires it from then on, as if it were in their
// configuration. A schedule of the same name in the schedulers'
// configuration takes precedence. ErrInvalidArgument for an invalid
// schedule (the error names the field), ErrNotFound when its queue is
// not registered.
func (i *Inspector) SetSchedule(ctx context.Context, s periodic.Schedule) error {
	if _, err := s.Compile(); err != nil {
		return err // a *periodic.Error: ErrInvalidArgument
	}
	if err := i.mustExist(ctx, s.Queue); err != nil {
		return mapErr(err)
	}
	def, err := s.Encode()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	return mapErr(i.store.PutScheduleDef(ctx, s.Name, def))
}

// RemoveSchedule removes a schedule registered at run time: it stops
// firing once the schedulers have heard (its recorded state stays, so
// registering it again does not fire an occurrence twice). ErrNotFound
// if no schedule of that name is registered.
func (i *Inspector) RemoveSchedule(ctx context.Context, name string) error {
	ok, err := i.store.DeleteScheduleDef(ctx, name)
	if err != nil {
		return mapErr(err)
	}
	if !ok {
		return fmt.Errorf("%w: schedule %q is not registered", ErrNotFound, name)
	}
	return nil
}

// RegisteredSchedules returns the schedules registered at run time, in
// name order. An entry that does not decode (written by hand, or by a
// newer version) is left out and reported in the error, joined, next to
// the valid ones.
func (i *Inspector) RegisteredSchedules(ctx context.Context) ([]*periodic.Compiled, error) {
	defs, err := i.store.ScheduleDefs(ctx)
	if err != nil {
		return nil, mapErr(err)
	}
	out := []*periodic.Compiled{} // not nil: the registry was read
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(defs)) {
		c, err := periodic.Decode(name, defs[name])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, c)
	}
	return out, errors.Join(errs...)
}

// RecordedSchedules returns the names of the schedules whose state Redis
// records (an occurrence fired, skipped or handed over) in any shard,
// sorted, whether or not any configuration still declares them: what a
// caller without the schedulers' configuration can know of them.
func (i *Inspector) RecordedSchedules(ctx context.Context) ([]string, error) {
	if _, err := i.layout(ctx); err != nil {
		return nil, err
	}
	return i.store.RecordedSchedules(ctx)
}
