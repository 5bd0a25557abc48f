package errtext

import (
	"errors"
	"strings"
	"testing"
)

type typed struct{}

func (typed) Error() string { return "hourglass: typed" }

func TestErrorfSaysThePrefixOnce(t *testing.T) {
	t.Parallel()
	kind := errors.New("hourglass: invalid argument")
	cause := errors.New("hourglass: shard count 0 not in 1..1024")
	err := Errorf("%w: %w", kind, cause)
	if want := "hourglass: invalid argument: shard count 0 not in 1..1024"; err.Error() != want {
		t.Fatalf("got %q, want %q", err, want)
	}
	if !errors.Is(err, kind) || !errors.Is(err, cause) {
		t.Fatalf("%v does not wrap its arguments", err)
	}
	var tp typed
	err = Errorf("acquire %s: %w (%v)", "lock", tp, errors.New("plain"))
	if want := "hourglass: acquire lock: typed (plain)"; err.Error() != want || !errors.As(err, &tp) {
		t.Fatalf("got %q, want %q, as typed", err, want)
	}
	if err := Errorf("nil: %v", error(nil)); strings.Count(err.Error(), "hourglass:") != 1 {
		t.Fatalf("nil argument: %q", err)
	}
}
