// Package confcheck is the validation idiom every library's
// Config.Validate shares (client, worker, scan, recovery, reshard,
// election): it collects every problem, each an error wrapping the
// package's sentinel (ErrInvalidConfig), and joins them into one error
// that says the sentinel's text once, so that a caller sees all that is
// wrong at once and can test the kind with errors.Is.
//
// A problem with one field is a *FieldError naming the field, so that
// internal/config can report it under the configuration key that set the
// field: the library's Validate is the only rule, and the configuration
// adds the key name. The range helpers (IntRange, AtLeast,
// DurationRange, Whole) word every range problem the same way in every
// package.
//
// The idiom around it: each package states its defaults and limits as
// exported constants (and, where the binaries configure it: scan,
// recovery, reshard, worker, returns them all from DefaultConfig);
// Validate checks a Config as the caller wrote it; New calls Validate,
// then fills the zero fields that mean "the default" (withDefaults, with
// Or). A field whose setting can be off (a bound, a grace period, a
// linger) has no such default: its zero means off, as the configuration
// key's 0 does, and DefaultConfig holds its default.
package confcheck

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hourglass-sched/hourglass/internal/errtext"
)

// Problems collects a Config's problems.
type Problems struct {
	kind error
	errs []error
}

// New returns an empty collection whose errors wrap kind.
func New(kind error) *Problems { return &Problems{kind: kind} }

// Addf records a problem that is not one field's; format and args may
// wrap a cause with %w. A cause says its text without the "hourglass: "
// the kind says already (errtext.Inner).
func (p *Problems) Addf(format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("%w: "+format, append([]any{p.kind}, errtext.Inner(args...)...)...))
}

// Field records a problem with field (its Go name, for example "Limit";
// a nested field is dotted: "Backoff.Base"). The message says what the
// field must be, for example "must be at least 1s (got 0s)"; format and
// args may wrap a cause with %w.
func (p *Problems) Field(field, format string, args ...any) {
	err := fmt.Errorf(format, errtext.Inner(args...)...)
	p.errs = append(p.errs, &FieldError{Field: field, Msg: err.Error(), kind: p.kind, cause: errors.Unwrap(err)})
}

// IntRange records a problem with field unless lo <= n <= hi.
func (p *Problems) IntRange(field string, n, lo, hi int64) {
	if n < lo || n > hi {
		p.Field(field, "must be between %d and %d (got %d)", lo, hi, n)
	}
}

// AtLeast records a problem with field unless lo <= n.
func (p *Problems) AtLeast(field string, n, lo int64) {
	if n < lo {
		p.Field(field, "must be at least %d (got %d)", lo, n)
	}
}

// DurationRange records a problem with field unless lo <= d and, if hi
// > 0, d <= hi.
func (p *Problems) DurationRange(field string, d, lo, hi time.Duration) {
	switch {
	case d < lo:
		p.Field(field, "must be at least %s (got %s)", lo, d)
	case hi > 0 && d > hi:
		p.Field(field, "must be at most %s (got %s)", hi, d)
	}
}

// Whole records a problem with field unless d is a whole number of unit
// (time.Second or time.Millisecond): the protocol carries it in that
// unit, and a fraction would be cut off silently.
func (p *Problems) Whole(field string, d, unit time.Duration) {
	if d%unit != 0 {
		p.Field(field, "must be a whole number of %s (got %s)", UnitName(unit), d)
	}
}

// UnitName names a unit of Whole in the plural: "seconds",
// "milliseconds".
func UnitName(unit time.Duration) string {
	switch unit {
	case time.Hour:
		return "hours"
	case time.Minute:
		return "minutes"
	case time.Second:
		return "seconds"
	case time.Millisecond:
		return "milliseconds"
	case time.Microsecond:
		return "microseconds"
	}
	return "multiples of " + unit.String()
}

// Or returns v, or def if v is its type's zero value: how withDefaults
// fills a zero field that means the default.
func Or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Err returns the problems as one error, or nil when there are none. Its
// message says the kind once, then each problem, separated by "; "
// ("hourglass: invalid config: Limit must be ...; Every must be ..."); it
// unwraps to every problem (Each visits them).
func (p *Problems) Err() error {
	if len(p.errs) == 0 {
		return nil
	}
	return &problems{kind: p.kind, errs: p.errs}
}

// problems is the error of Err.
type problems struct {
	kind error
	errs []error
}

func (e *problems) Error() string {
	head := e.kind.Error() + ": "
	parts := make([]string, len(e.errs))
	for i, err := range e.errs {
		parts[i] = strings.TrimPrefix(err.Error(), head)
	}
	return head + strings.Join(parts, "; ")
}

// Unwrap returns every problem.
func (e *problems) Unwrap() []error { return e.errs }

// FieldError is a problem with one field of a Config. It wraps the
// package's sentinel and the cause given with %w, if any.
type FieldError struct {
	// Field is the Go name of the field ("Limit", "Backoff.Base").
	Field string
	// Msg says what the field must be: "must be at least 1s (got 0s)".
	Msg   string
	kind  error
	cause error
}

// Error implements error: "<kind>: <Field> <Msg>", for example
// "scan: invalid config: Limit must be between 1 and 10000 (got 0)".
func (e *FieldError) Error() string { return e.kind.Error() + ": " + e.Field + " " + e.Msg }

// Unwrap returns the package's sentinel and the cause, if any.
func (e *FieldError) Unwrap() []error {
	if e.cause == nil {
		return []error{e.kind}
	}
	return []error{e.kind, e.cause}
}

// Each calls fn for every error joined in err (err itself if it joins
// none), so that a caller can pick out the *FieldErrors.
func Each(err error, fn func(error)) {
	if err == nil {
		return
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok && !isField(err) {
		for _, e := range j.Unwrap() {
			fn(e)
		}
		return
	}
	fn(err)
}

func isField(err error) bool {
	_, ok := err.(*FieldError)
	return ok
}
