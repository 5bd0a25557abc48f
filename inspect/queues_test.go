package inspect_test

import (
	"errors"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestResumeOfAnUnknownQueueIsNotFound: Resume of a name that is neither
// paused nor registered is ErrNotFound, as Pause is (it returned nil, and
// the CLI printed "resumed"); a registered queue resumes whether paused
// or not, and the pause of a queue that is no longer registered can still
// be cleared.
func TestResumeOfAnUnknownQueueIsNotFound(t *testing.T) {
	t.Parallel()
	e, in := newInspector(t, 4)
	ctx := testenv.Ctx(t, 30*time.Second)
	if err := in.Resume(ctx, "nosuch"); !errors.Is(err, inspect.ErrNotFound) {
		t.Fatalf("resume of an unknown queue: %v, want ErrNotFound", err)
	}
	if err := in.Resume(ctx, "a"); err != nil {
		t.Fatalf("resume of a registered queue that is not paused: %v", err)
	}
	if err := in.Pause(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := in.Resume(ctx, "a"); err != nil {
		t.Fatalf("resume of a paused queue: %v", err)
	}
	// A pause left behind by a queue since removed (the registry forgets
	// a drained queue; the paused set does not).
	if _, err := e.Store.SetPaused(ctx, "gone", true); err != nil {
		t.Fatal(err)
	}
	if err := in.Resume(ctx, "gone"); err != nil {
		t.Fatalf("resume of a paused queue that is not registered: %v", err)
	}
	paused, err := in.PausedQueues(ctx)
	if err != nil || len(paused) != 0 {
		t.Fatalf("paused after the resumes: %v %v", paused, err)
	}
}
