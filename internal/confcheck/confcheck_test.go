package confcheck

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var errKind = errors.New("pkg: invalid config")

func TestProblems(t *testing.T) {
	t.Parallel()
	p := New(errKind)
	if err := p.Err(); err != nil {
		t.Fatalf("no problem: %v", err)
	}
	cause := errors.New("cause")
	p.Addf("Limit %d too big", 7)
	p.Addf("Layout: %w", cause)
	err := p.Err()
	if !errors.Is(err, errKind) || !errors.Is(err, cause) {
		t.Fatalf("%v does not wrap the kind and the cause", err)
	}
	if want := "pkg: invalid config: Limit 7 too big; Layout: cause"; err.Error() != want {
		t.Fatalf("got %q, want %q", err, want)
	}
}

func TestFieldProblems(t *testing.T) {
	t.Parallel()
	p := New(errKind)
	p.IntRange("Limit", 0, 1, 10)
	p.IntRange("Limit", 5, 1, 10) // fine
	p.DurationRange("Every", 50*time.Millisecond, 100*time.Millisecond, 0)
	p.DurationRange("Linger", time.Second, 0, 50*time.Millisecond)
	p.Whole("TTL", 1500*time.Millisecond, time.Second)
	cause := errors.New("cause")
	p.Field("Backoff.Base", "is bad: %w", cause)
	err := p.Err()
	if !errors.Is(err, errKind) || !errors.Is(err, cause) {
		t.Fatalf("%v does not wrap the kind and the cause", err)
	}
	var got []string
	Each(err, func(e error) {
		var fe *FieldError
		if !errors.As(e, &fe) {
			t.Fatalf("%v is not a *FieldError", e)
		}
		got = append(got, fe.Field+": "+fe.Msg)
	})
	want := []string{
		"Limit: must be between 1 and 10 (got 0)",
		"Every: must be at least 100ms (got 50ms)",
		"Linger: must be at most 50ms (got 1s)",
		"TTL: must be a whole number of seconds (got 1.5s)",
		"Backoff.Base: is bad: cause",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if s := err.Error(); !strings.HasPrefix(s, "pkg: invalid config: Limit must be between 1 and 10 (got 0); Every must be") {
		t.Fatalf("message %q", s)
	}
}

func TestOr(t *testing.T) {
	t.Parallel()
	if got := Or(0, 5); got != 5 {
		t.Errorf("Or(0, 5) = %d", got)
	}
	if got := Or(3, 5); got != 3 {
		t.Errorf("Or(3, 5) = %d", got)
	}
	var e error
	if got := Or(e, errKind); got != errKind {
		t.Errorf("Or(nil, errKind) = %v", got)
	}
}
