// Package periodic describes periodic schedules: a task enqueued once per
// occurrence of a cron expression or a fixed interval, by the scheduler
// replica that owns the schedule's shard. A Schedule is declared in the
// scheduler's configuration (section periodic) or registered at run time
// with the inspect package; this package validates it and computes its
// occurrences, the same way on every replica.
//
// Occurrences are instants. A cron expression has five fields (minute,
// hour, day of month, month, day of week) or six with a leading seconds
// field, or a descriptor (@hourly, @daily, @weekly, @monthly, @yearly,
// @every <duration> is refused: use Interval); it is evaluated in
// TimeZone (an IANA name, UTC by default), parsed by
// github.com/robfig/cron/v3. An Interval schedule occurs at every whole
// multiple of Interval since the Unix epoch, so all replicas agree
// without any shared start time.
//
// Around daylight saving time changes the cron library decides: a
// wall-clock time that does not exist on a spring-forward day (02:30 in
// most of Europe and America) does not occur that day; an hourly schedule
// across a fall-back occurs at every real hour, so the repeated hour's
// wall-clock times occur twice (TestDaylightSavingTime).
package periodic

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/hourglass-sched/hourglass"
)

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("hourglass: invalid schedule")

// Error is a validation error: the schedule, the field at fault (as its
// configuration key: "cron", "time_zone", …) and why. It wraps
// ErrInvalid, and matches hourglass.ErrInvalidArgument (as
// client.ErrInvalidArgument and inspect.ErrInvalidArgument) too.
type Error struct {
	Schedule, Field, Reason string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%v %q: %s: %s", ErrInvalid, e.Schedule, e.Field, e.Reason)
}

// Unwrap returns ErrInvalid and hourglass.ErrInvalidArgument.
func (e *Error) Unwrap() []error { return []error{ErrInvalid, hourglass.ErrInvalidArgument} }

// CatchUp says what happens to occurrences missed while no scheduler ran
// the schedule (all replicas down, or none owning its shard).
type CatchUp string

const (
	// CatchUpSkip fires none of them: the next occurrence is the first
	// after the schedulers came back. The default.
	CatchUpSkip CatchUp = "skip"
	// CatchUpLatest fires the latest missed occurrence (due at once),
	// then goes on.
	CatchUpLatest CatchUp = "latest"
	// CatchUpAll fires every missed occurrence within CatchUpWindow, in
	// order, each due at once, at most MaxCatchUp of them (the latest).
	CatchUpAll CatchUp = "all"
)

// Overlap says whether an occurrence fires while the task of the one
// before is still scheduled, ready or running.
type Overlap string

const (
	// OverlapAllow fires every occurrence. The default.
	OverlapAllow Overlap = "allow"
	// OverlapSkip skips an occurrence while the previous occurrence's
	// task is still stored (scheduled, ready, running or waiting for a
	// retry); the skip is counted.
	OverlapSkip Overlap = "skip"
)

// Bounds of a schedule.
const (
	// DefaultCatchUpWindow is how far back CatchUpAll looks by default.
	DefaultCatchUpWindow = time.Hour
	// MaxCatchUpWindow bounds CatchUpWindow.
	MaxCatchUpWindow = 7 * 24 * time.Hour
	// MaxCatchUp bounds the occurrences CatchUpAll fires at once.
	MaxCatchUp = 1000
	// MinInterval is the shortest Interval (and the cron resolution).
	MinInterval = time.Second
	// MaxNameLen bounds a schedule name.
	MaxNameLen = 128
	// MaxRetriesLimit bounds MaxRetries, as client.MaxRetriesLimit
	// bounds a task's.
	MaxRetriesLimit = 1000
)

// NameRule describes the legal schedule names, for error messages.
const NameRule = `^[A-Za-z0-9_.:-]{1,128}$`

var nameRE = regexp.MustCompile(NameRule)

// Schedule is one periodic schedule.
type Schedule struct {
	// Name identifies the schedule; it names its tasks ("<name>@<unix
	// ms of the occurrence>") and picks its shard.
	Name string `json:"name"`
	// Queue and Payload of the tasks it creates.
	Queue   string `json:"queue"`
	Payload []byte `json:"payload,omitempty"`
	// Cron or Interval: exactly one.
	Cron     string        `json:"cron,omitempty"`
	Interval time.Duration `json:"interval,omitempty"`
	// TimeZone of Cron, an IANA name ("Europe/Paris"); "" is UTC.
	TimeZone string `json:"time_zone,omitempty"`
	// Jitter delays each occurrence's task by a pseudo-random amount in
	// [0, Jitter), the same on every replica (a hash of the name and the
	// occurrence), to spread schedules that share a time. Less than the
	// schedule's period.
	Jitter time.Duration `json:"jitter,omitempty"`
	// MaxRetries of the tasks, 0..1000 (0: never retried); nil for the
	// queue's default (hourglass.Retries makes the pointer). A registry
	// record of an older version that stores -1 means the default too.
	MaxRetries *int `json:"max_retries,omitempty"`
	// Timeout of the tasks; 0 for the queue's default.
	Timeout time.Duration `json:"timeout,omitempty"`
	// CatchUp policy ("" is CatchUpSkip) and, for CatchUpAll, its window
	// (0 is DefaultCatchUpWindow).
	CatchUp       CatchUp       `json:"catch_up,omitempty"`
	CatchUpWindow time.Duration `json:"catch_up_window,omitempty"`
	// Overlap policy ("" is OverlapAllow).
	Overlap Overlap `json:"overlap,omitempty"`
}

var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Compiled is a validated Schedule, ready to compute occurrences.
type Compiled struct {
	Schedule
	cron cron.Schedule
	loc  *time.Location
}

// Compile validates s and returns it with its defaults applied. An error
// wraps ErrInvalid and names the field.
func (s Schedule) Compile() (*Compiled, error) {
	bad := func(field, format string, args ...any) error {
		return &Error{Schedule: s.Name, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	if !nameRE.MatchString(s.Name) {
		return nil, bad("name", "must match %s", NameRule)
	}
	if s.Queue == "" {
		return nil, bad("queue", "required")
	}
	c := &Compiled{Schedule: s, loc: time.UTC}
	switch {
	case s.Cron != "" && s.Interval != 0:
		return nil, bad("cron", "give cron or interval, not both")
	case s.Cron == "" && s.Interval == 0:
		return nil, bad("cron", "give cron or interval")
	case s.Interval != 0:
		if s.Interval < MinInterval || s.Interval%time.Millisecond != 0 {
			return nil, bad("interval", "must be at least %s and a whole number of milliseconds (got %s)", MinInterval, s.Interval)
		}
		if s.TimeZone != "" {
			return nil, bad("time_zone", "applies to cron only (an interval counts from the Unix epoch)")
		}
	default:
		if strings.HasPrefix(strings.TrimSpace(s.Cron), "@every") {
			return nil, bad("cron", "@every is not supported: use interval")
		}
		if strings.Contains(s.Cron, "TZ=") {
			return nil, bad("cron", "give the time zone in time_zone, not in the expression")
		}
		sched, err := parser.Parse(s.Cron)
		if err != nil {
			return nil, bad("cron", "%v", err)
		}
		c.cron = sched
		if s.TimeZone != "" {
			loc, err := time.LoadLocation(s.TimeZone)
			if err != nil {
				return nil, bad("time_zone", "%v", err)
			}
			c.loc = loc
		}
	}
	if s.MaxRetries != nil && (*s.MaxRetries < 0 || *s.MaxRetries > MaxRetriesLimit) {
		return nil, bad("max_retries", "must be 0..%d, or unset for the queue's default (got %d)", MaxRetriesLimit, *s.MaxRetries)
	}
	if s.Timeout < 0 || s.Timeout%time.Millisecond != 0 {
		return nil, bad("timeout", "must be 0 (the queue's default) or a positive whole number of milliseconds (got %s)", s.Timeout)
	}
	if s.Jitter < 0 {
		return nil, bad("jitter", "must not be negative (got %s)", s.Jitter)
	}
	switch c.CatchUp {
	case "":
		c.CatchUp = CatchUpSkip
	case CatchUpSkip, CatchUpLatest, CatchUpAll:
	default:
		return nil, bad("catch_up", "must be skip, latest or all (got %q)", s.CatchUp)
	}
	if c.CatchUpWindow == 0 {
		c.CatchUpWindow = DefaultCatchUpWindow
	}
	if c.CatchUpWindow < 0 || c.CatchUpWindow > MaxCatchUpWindow {
		return nil, bad("catch_up_window", "must be in (0, %s] (got %s)", MaxCatchUpWindow, s.CatchUpWindow)
	}
	switch c.Overlap {
	case "":
		c.Overlap = OverlapAllow
	case OverlapAllow, OverlapSkip:
	default:
		return nil, bad("overlap", "must be allow or skip (got %q)", s.Overlap)
	}
	// The jitter must leave occurrences in order: less than the shortest
	// gap, judged over the next occurrences from a fixed instant.
	if c.Jitter > 0 {
		t := c.Next(time.Unix(0, 0))
		for range 32 {
			n := c.Next(t)
			if n.IsZero() {
				break
			}
			if c.Jitter >= n.Sub(t) {
				return nil, bad("jitter", "must be shorter than the time between occurrences (%s)", n.Sub(t))
			}
			t = n
		}
	}
	if c.Next(time.Now()).IsZero() {
		return nil, bad("cron", "never occurs")
	}
	return c, nil
}

// Next returns the first occurrence strictly after t, to the millisecond
// (zero if the expression never occurs again).
func (c *Compiled) Next(t time.Time) time.Time {
	if c.Interval > 0 {
		iv := c.Interval.Milliseconds()
		return time.UnixMilli((t.UnixMilli()/iv + 1) * iv).UTC() // times before 1970 are not occurrences
	}
	n := c.cron.Next(t.In(c.loc))
	if n.IsZero() {
		return n
	}
	return n.Truncate(time.Millisecond)
}

// Due returns when the task of occurrence occ is due: occ plus its jitter.
func (c *Compiled) Due(occ time.Time) time.Time {
	if c.Jitter <= 0 {
		return occ
	}
	h := crc32.ChecksumIEEE(fmt.Appendf(nil, "%s@%d", c.Name, occ.UnixMilli()))
	return occ.Add(time.Duration(uint64(h)%uint64(c.Jitter.Milliseconds())) * time.Millisecond)
}

// Missed returns the occurrences after last and at or before now that the
// catch-up policy fires, oldest first; none when last is zero (the
// schedule never fired: it starts from now).
func (c *Compiled) Missed(last, now time.Time) []time.Time {
	if last.IsZero() || !now.After(last) {
		return nil
	}
	switch c.CatchUp {
	case CatchUpLatest:
		if t := c.latest(last, now); !t.IsZero() {
			return []time.Time{t}
		}
		return nil
	case CatchUpAll:
		from := last
		if w := now.Add(-c.CatchUpWindow); w.After(from) {
			from = w.Add(-time.Millisecond) // an occurrence at the window's start counts
		}
		var out []time.Time
		for t := c.Next(from); !t.IsZero() && !t.After(now); t = c.Next(t) {
			out = append(out, t)
			if len(out) > MaxCatchUp {
				out = out[1:]
			}
		}
		return out
	}
	return nil
}

// latest returns the last occurrence in (last, now], or zero: it looks
// back from now over doubling spans, so a frequent schedule whose last
// firing is long ago costs a few steps, not one per missed occurrence.
func (c *Compiled) latest(last, now time.Time) time.Time {
	for d := time.Second; ; d *= 2 {
		start := now.Add(-d)
		if !start.After(last) {
			start = last
		}
		if t := c.Next(start); !t.IsZero() && !t.After(now) {
			for n := c.Next(t); !n.IsZero() && !n.After(now); n = c.Next(n) {
				t = n
			}
			return t
		}
		if start.Equal(last) {
			return time.Time{}
		}
	}
}

// Encode returns s as the JSON the run-time registry stores. A nil
// MaxRetries is stored as -1, as versions before MaxRetries was a pointer
// wrote the queue's default: their schedulers, still running during a
// rolling upgrade, read a missing max_retries as 0 (never retry).
func (s Schedule) Encode() ([]byte, error) {
	if s.MaxRetries == nil {
		s.MaxRetries = &defaultRetries
	}
	return json.Marshal(s)
}

// defaultRetries is the stored form of a nil MaxRetries (Encode).
var defaultRetries = -1

// Decode reads a schedule the registry stores under name and compiles
// it; the name stored is the registry's key. A max_retries of -1, which
// versions before MaxRetries was a pointer wrote for the queue's
// default, reads as the default (nil).
func Decode(name string, data []byte) (*Compiled, error) {
	var s Schedule
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, &Error{Schedule: name, Field: "definition", Reason: err.Error()}
	}
	s.Name = name
	if s.MaxRetries != nil && *s.MaxRetries == -1 {
		s.MaxRetries = nil
	}
	return s.Compile()
}

// Unshadowed returns the schedules of registered whose names configured
// does not use: the configuration wins on a shared name, for the
// schedulers that fire and the tools that list them alike.
func Unshadowed(configured, registered []*Compiled) []*Compiled {
	var out []*Compiled
	for _, r := range registered {
		if !slices.ContainsFunc(configured, func(c *Compiled) bool { return c.Name == r.Name }) {
			out = append(out, r)
		}
	}
	return out
}
