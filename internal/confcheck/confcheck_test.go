package confcheck

import (
	"errors"
	"testing"
)

var errKind = errors.New("pkg: invalid config")

func TestProblems(t *testing.T) {
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
	if want := "pkg: invalid config: Limit 7 too big\npkg: invalid config: Layout: cause"; err.Error() != want {
		t.Fatalf("got %q, want %q", err, want)
	}
}
