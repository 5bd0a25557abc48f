package inspect_test

import (
	"errors"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/client"
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

// TestErrorsKeepTheirKindAndSayWhatOnce: an error of a kind (ErrNotFound,
// ErrInvalidArgument) said its kind, then the store's protocol error
// with the client's prefix ("inspect: not found: hourglass: task not
// found: ..."). It now reads as "hourglass: " and what happened, once,
// and errors.Is still finds this package's sentinel and the store's (the
// client's).
func TestErrorsKeepTheirKindAndSayWhatOnce(t *testing.T) {
	t.Parallel()
	_, in := newInspector(t, 2)
	ctx := testenv.Ctx(t, 30*time.Second)
	_, taskErr := in.Task(ctx, "nosuch")
	_, cancelErr := in.Cancel(ctx, "nosuch")
	_, queueErr := in.Queue(ctx, "nosuch")
	_, listErr := in.ListTasks(ctx, inspect.ListOptions{State: "bogus"})
	for _, c := range []struct {
		err       error
		kind, and error // and: another error it must wrap, or nil
		msg       string
	}{
		{taskErr, inspect.ErrNotFound, client.ErrNotFound, `hourglass: task not found: "nosuch"`},
		{cancelErr, inspect.ErrNotFound, client.ErrNotFound, `hourglass: task not found: "nosuch"`},
		{in.Replay(ctx, "nosuch", time.Time{}), inspect.ErrNotFound, nil, `hourglass: no dead letter "nosuch"`},
		{in.Purge(ctx, "nosuch"), inspect.ErrNotFound, nil, `hourglass: no dead letter "nosuch"`},
		{queueErr, inspect.ErrNotFound, nil, `hourglass: queue "nosuch" not found`},
		{in.RemoveQueue(ctx, "nosuch"), inspect.ErrNotFound, nil, `hourglass: queue "nosuch" is not registered`},
		{in.Pause(ctx, "nosuch"), inspect.ErrNotFound, nil, `hourglass: queue "nosuch" is not registered`},
		{in.SetQueue(ctx, "bad/name", inspect.Policy{}), inspect.ErrInvalidArgument, client.ErrInvalidArgument, `hourglass: invalid argument: queue name "bad/name"`},
		{listErr, inspect.ErrInvalidArgument, nil, `hourglass: invalid state "bogus" (want scheduled, ready, active or dead)`},
	} {
		if c.err == nil || c.err.Error() != c.msg || !errors.Is(c.err, c.kind) || (c.and != nil && !errors.Is(c.err, c.and)) {
			t.Errorf("error %v: want %q, of kind %v (and %v)", c.err, c.msg, c.kind, c.and)
		}
	}
}
