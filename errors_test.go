package hourglass_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass"
	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
	"github.com/hourglass-sched/hourglass/periodic"
	"github.com/hourglass-sched/hourglass/worker"
)

// named is a sentinel under one of its public names.
type named struct {
	name string
	err  error
}

// sharedSentinels lists, for every error more than one package names,
// each of its names. Every name of a row is one value.
var sharedSentinels = [][]named{
	{{"hourglass.ErrNotFound", hourglass.ErrNotFound}, {"client.ErrNotFound", client.ErrNotFound}, {"inspect.ErrNotFound", inspect.ErrNotFound}},
	{{"hourglass.ErrActive", hourglass.ErrActive}, {"client.ErrActive", client.ErrActive}, {"inspect.ErrActive", inspect.ErrActive},
		{"inspect.ErrTaskActive", inspect.ErrTaskActive}},
	{{"hourglass.ErrInvalidArgument", hourglass.ErrInvalidArgument}, {"client.ErrInvalidArgument", client.ErrInvalidArgument},
		{"inspect.ErrInvalidArgument", inspect.ErrInvalidArgument}},
	{{"hourglass.ErrInvalidConfig", hourglass.ErrInvalidConfig}, {"client.ErrInvalidConfig", client.ErrInvalidConfig},
		{"worker.ErrInvalidConfig", worker.ErrInvalidConfig}, {"inspect.ErrInvalidConfig", inspect.ErrInvalidConfig}},
	{{"hourglass.ErrDuplicate", hourglass.ErrDuplicate}, {"client.ErrDuplicate", client.ErrDuplicate}},
	{{"hourglass.ErrUnknownQueue", hourglass.ErrUnknownQueue}, {"client.ErrUnknownQueue", client.ErrUnknownQueue}},
	{{"hourglass.ErrPayloadTooLarge", hourglass.ErrPayloadTooLarge}, {"client.ErrPayloadTooLarge", client.ErrPayloadTooLarge}},
	{{"hourglass.ErrNotReplicated", hourglass.ErrNotReplicated}, {"client.ErrNotReplicated", client.ErrNotReplicated}},
	{{"hourglass.ErrStaleToken", hourglass.ErrStaleToken}, {"worker.ErrStaleToken", worker.ErrStaleToken}},
}

// kindOf says which rows' errors also match another row's: an invalid
// config is an invalid argument (not the other way).
var kindOf = map[error]error{hourglass.ErrInvalidConfig: hourglass.ErrInvalidArgument}

// TestSentinelsMatchAcrossPackages: every name of a shared sentinel
// matches every other, both ways, bare and wrapped, and no other row's
// (but for the kinds in kindOf).
func TestSentinelsMatchAcrossPackages(t *testing.T) {
	t.Parallel()
	for i, row := range sharedSentinels {
		for _, a := range row {
			wrapped := fmt.Errorf("some operation: %w", a.err)
			for _, b := range row {
				if !errors.Is(a.err, b.err) || !errors.Is(wrapped, b.err) {
					t.Errorf("errors.Is(%s, %s) is false", a.name, b.name)
				}
			}
			for j, other := range sharedSentinels {
				if j == i {
					continue
				}
				want := kindOf[row[0].err] == other[0].err
				if got := errors.Is(wrapped, other[0].err); got != want {
					t.Errorf("errors.Is(%s, %s) = %v, want %v", a.name, other[0].name, got, want)
				}
			}
		}
	}
	// A schedule's validation error is periodic's own kind and an invalid
	// argument.
	_, err := periodic.Schedule{Name: "bad name!", Queue: "q", Interval: time.Minute}.Compile()
	for _, n := range append(sharedSentinels[2], named{"periodic.ErrInvalid", periodic.ErrInvalid}) {
		if !errors.Is(err, n.err) {
			t.Errorf("periodic's validation error %v does not match %s", err, n.name)
		}
	}
}

// wantIs fails the test unless err matches every name of row.
func wantIs(t *testing.T, call string, err error, row []named) {
	t.Helper()
	for _, n := range row {
		if !errors.Is(err, n.err) {
			t.Errorf("%s: %v does not match %s", call, err, n.name)
		}
	}
}

// TestCallsReturnSharedSentinels: errors returned by real calls against
// a real Redis match every name of their sentinel: rescheduling a running
// task through client and inspect, looking up and cancelling a missing
// one, an enqueue of a live id and of an unknown queue, bad arguments,
// and constructors given a Config they cannot use.
func TestCallsReturnSharedSentinels(t *testing.T) {
	t.Parallel()
	var (
		notFound, active, invalidArg = sharedSentinels[0], sharedSentinels[1], sharedSentinels[2]
		invalidConfig, duplicate     = sharedSentinels[3], sharedSentinels[4]
		unknownQueue                 = sharedSentinels[5]
	)
	e, c, in := deployment(t, "errs", client.Config{})
	ctx := testenv.Ctx(t, 30*time.Second)
	running := e.Popped(shardtest.Queue, "running-", 1)[0].Task.ID

	_, err := c.Reschedule(ctx, running, time.Now().Add(time.Hour))
	wantIs(t, "client Reschedule of a running task", err, active)
	_, err = in.Reschedule(ctx, running, time.Now().Add(time.Hour))
	wantIs(t, "inspect Reschedule of a running task", err, active)

	_, err = c.Cancel(ctx, "missing")
	wantIs(t, "client Cancel of a missing task", err, notFound)
	_, err = c.Lookup(ctx, "missing")
	wantIs(t, "client Lookup of a missing task", err, notFound)
	_, err = in.Task(ctx, "missing")
	wantIs(t, "inspect Task of a missing task", err, notFound)
	_, err = in.Cancel(ctx, "missing")
	wantIs(t, "inspect Cancel of a missing task", err, notFound)
	_, err = in.Queue(ctx, "nope")
	wantIs(t, "inspect Queue of an unregistered queue", err, notFound)

	_, err = c.Enqueue(ctx, client.Task{ID: running, Queue: shardtest.Queue})
	wantIs(t, "client Enqueue of a live id", err, duplicate)
	_, err = c.Enqueue(ctx, client.Task{ID: "x", Queue: "nope"})
	wantIs(t, "client Enqueue to an unknown queue", err, unknownQueue)

	_, err = c.Enqueue(ctx, client.Task{ID: "x", Queue: shardtest.Queue, Delay: -time.Second})
	wantIs(t, "client Enqueue with a negative delay", err, invalidArg)
	_, err = in.ListTasks(ctx, inspect.ListOptions{State: inspect.StateScheduled, Cursor: "not a cursor"})
	wantIs(t, "inspect ListTasks with a malformed cursor", err, invalidArg)
	err = in.SetSchedule(ctx, periodic.Schedule{Name: "s", Queue: shardtest.Queue})
	wantIs(t, "inspect SetSchedule of an invalid schedule", err, invalidArg)

	_, err = client.New(e.RDB, client.Config{Shards: -1})
	wantIs(t, "client.New with a bad Config", err, append(invalidConfig, invalidArg...))
	_, err = worker.New(e.RDB, worker.Config{FetchTimeout: time.Millisecond})
	wantIs(t, "worker.New with a bad Config", err, append(invalidConfig, invalidArg...))
	_, err = inspect.New(nil, inspect.Config{})
	wantIs(t, "inspect.New without Redis", err, append(invalidConfig, invalidArg...))
}
