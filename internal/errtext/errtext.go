// Package errtext words the errors of Hourglass's public packages
// (client, worker, inspect, periodic, coord) and of the store they share
// (internal/shard): every message starts with Prefix, once, and names no
// package. An error that wraps another says the other's text without its
// own Prefix, so that a wrapped sentinel reads "hourglass: invalid
// config: shard count 0 not in 1..1024", not "hourglass: invalid config:
// hourglass: invalid argument: ...".
package errtext

import (
	"fmt"
	"strings"
)

// Prefix starts every error message of the public packages.
const Prefix = "hourglass: "

// Trim returns msg without its leading Prefix: the text of an error said
// inside another's message, or in a field of a report.
func Trim(msg string) string { return strings.TrimPrefix(msg, Prefix) }

// Errorf is fmt.Errorf for an error of the public packages: its message
// is Prefix followed by format's text, in which every error argument
// reads without its own Prefix. %w wraps as fmt.Errorf's does: errors.Is
// and errors.As see the arguments unchanged.
func Errorf(format string, args ...any) error {
	return &prefixed{fmt.Errorf(format, Inner(args...)...)}
}

// Inner returns args with every error among them reading without its
// Prefix (and still unwrapping to itself), for a message that says its
// own prefix before them: a package's kind in confcheck, say.
func Inner(args ...any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		if err, ok := a.(error); ok && err != nil {
			a = trimmed{err}
		}
		out[i] = a
	}
	return out
}

// prefixed is an error whose message is Prefix and its cause's.
type prefixed struct{ err error }

func (e *prefixed) Error() string { return Prefix + e.err.Error() }

// Unwrap returns the error Errorf formatted.
func (e *prefixed) Unwrap() error { return e.err }

// trimmed is an error argument of Errorf: its text without Prefix.
type trimmed struct{ err error }

func (e trimmed) Error() string { return Trim(e.err.Error()) }

// Unwrap returns the argument.
func (e trimmed) Unwrap() error { return e.err }
