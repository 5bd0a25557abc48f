// Package confcheck is the validation idiom every library's
// Config.Validate shares (client, worker, scan, recovery, election): it
// collects every problem, each an error wrapping the package's sentinel
// (ErrInvalidConfig), and joins them, so that a caller sees all that is
// wrong at once and can test the kind with errors.Is.
//
// The idiom around it: each package states its defaults and limits as
// exported constants; Validate checks a Config as the caller wrote it,
// where a zero field is valid and means the default; New calls Validate,
// then fills the zero fields (withDefaults).
package confcheck

import (
	"errors"
	"fmt"
)

// Problems collects a Config's problems.
type Problems struct {
	kind error
	errs []error
}

// New returns an empty collection whose errors wrap kind.
func New(kind error) *Problems { return &Problems{kind: kind} }

// Addf records a problem; format and args may wrap a cause with %w.
func (p *Problems) Addf(format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("%w: "+format, append([]any{p.kind}, args...)...))
}

// Err returns the problems joined, or nil when there are none.
func (p *Problems) Err() error { return errors.Join(p.errs...) }
