package inspect

import (
	"errors"
	"fmt"
	"slices"

	"github.com/hourglass-sched/hourglass"
	"github.com/hourglass-sched/hourglass/internal/errtext"
	"github.com/hourglass-sched/hourglass/internal/shard"
)

// Sentinel errors callers can test with errors.Is. ErrNotFound,
// ErrInvalidArgument, ErrInvalidConfig, ErrActive and ErrDead are package
// hourglass's values, which client and worker return too:
// inspect.ErrActive is client.ErrActive. They are kinds: an error of a
// kind reads as what happened, after the "hourglass: " every error
// starts with, without the kind's own text ("hourglass: task not found:
// \"x\"", "hourglass: queue \"x\" is not registered").
var (
	// ErrNotFound: no task, dead letter, queue or schedule of that name.
	ErrNotFound = hourglass.ErrNotFound
	// ErrInvalidArgument: a bad queue name, policy, cursor, filter or
	// schedule.
	ErrInvalidArgument = hourglass.ErrInvalidArgument
	// ErrInvalidConfig: a Config New cannot use. It also matches
	// ErrInvalidArgument.
	ErrInvalidConfig = hourglass.ErrInvalidConfig
	// ErrActive: the task is running and cannot be cancelled or changed.
	ErrActive = hourglass.ErrActive
	// ErrDead: the task is a dead letter and cannot be changed (replay it).
	ErrDead = hourglass.ErrDead
	// ErrTaskActive is ErrActive.
	//
	// Deprecated: use ErrActive, the name client uses.
	ErrTaskActive = ErrActive
	// ErrNoEtcd was meant for a call that needs etcd without a client.
	//
	// Deprecated: never returned. Shards without Config.Owners leaves
	// the owners empty; etcd is read by package inspect/etcdowners.
	ErrNoEtcd = errors.New("hourglass: no etcd client configured")
	// ErrResizeRunning: Resize was refused because another change of the
	// shard count runs (or one was left half-prepared with another
	// count).
	ErrResizeRunning = errors.New("hourglass: a change of the shard count is running")
	// ErrPartial: a call over every shard could not read some of them
	// (their data is corrupt: a key of the wrong type, an epoch that is
	// not a number); its result holds the others. The error is a
	// *PartialError naming each shard.
	ErrPartial = errors.New("hourglass: some shards could not be read")
)

// kindError is an error of one of the sentinel kinds above (its kind,
// for errors.Is) whose message says what happened once, after the
// "hourglass: " of every error: "hourglass: task not found: \"x\"", not
// "hourglass: not found: hourglass: task not found: \"x\"". The kind's
// own text is left out (the kind is for programs; a person reads the
// message).
type kindError struct {
	kind  error
	msg   string
	cause error // the error it reports, or nil
}

func (e *kindError) Error() string { return e.msg }

// Unwrap returns the kind and the cause.
func (e *kindError) Unwrap() []error {
	if e.cause == nil {
		return []error{e.kind}
	}
	return []error{e.kind, e.cause}
}

// errorf returns an error of kind with the message format makes (whose
// %w, if any, it wraps), after "hourglass: ".
func errorf(kind error, format string, args ...any) error {
	err := errtext.Errorf(format, args...)
	return &kindError{kind: kind, msg: err.Error(), cause: err}
}

// ofKind returns err as an error of kind, with err's message, which
// says "hourglass: " once.
func ofKind(kind, err error) error {
	return &kindError{kind: kind, msg: errtext.Prefix + errtext.Trim(err.Error()), cause: err}
}

// ShardProblem is a shard a call could not read, and why.
type ShardProblem struct {
	Shard int    `json:"shard"`
	Error string `json:"error"`
}

// PartialError is returned, with the rest of the result, by a call over
// every shard that could not read some of them (Queues, Queue, Shards,
// Layout). It wraps ErrPartial. A failure to reach Redis at all is not
// partial: the call then fails as a whole.
type PartialError struct {
	Problems []ShardProblem
}

func (e *PartialError) Error() string {
	msg := fmt.Sprintf("%s%d shard(s) could not be read, the rest is shown", errtext.Prefix, len(e.Problems))
	for _, p := range e.Problems {
		msg += fmt.Sprintf("; shard %d: %s", p.Shard, p.Error)
	}
	return msg
}

// Unwrap returns ErrPartial.
func (e *PartialError) Unwrap() error { return ErrPartial }

// partialOf converts the store's partial-read error; other errors, and
// nil, are returned as they are (mapped).
func partialOf(err error) error {
	var pe *shard.PartialError
	if !errors.As(err, &pe) {
		return mapErr(err)
	}
	out := &PartialError{}
	for sh, e := range pe.Failed {
		out.Problems = append(out.Problems, ShardProblem{Shard: sh, Error: errtext.Trim(e.Error())})
	}
	slices.SortFunc(out.Problems, func(a, b ShardProblem) int { return a.Shard - b.Shard })
	return out
}

// problems returns the problem of each shard of err (a *PartialError),
// by shard.
func problems(err error) map[int]string {
	var pe *PartialError
	if !errors.As(err, &pe) {
		return nil
	}
	m := make(map[int]string, len(pe.Problems))
	for _, p := range pe.Problems {
		m[p.Shard] = p.Error
	}
	return m
}

// joinPartial merges the shard problems of two partial errors (either
// may be nil).
func joinPartial(a, b error) error {
	var pa, pb *PartialError
	errors.As(a, &pa)
	errors.As(b, &pb)
	switch {
	case pa == nil && pb == nil:
		return nil
	case pa == nil:
		return pb
	case pb == nil:
		return pa
	}
	seen := problems(pa)
	out := &PartialError{Problems: slices.Clone(pa.Problems)}
	for _, p := range pb.Problems {
		if _, ok := seen[p.Shard]; !ok {
			out.Problems = append(out.Problems, p)
		}
	}
	slices.SortFunc(out.Problems, func(a, b ShardProblem) int { return a.Shard - b.Shard })
	return out
}
