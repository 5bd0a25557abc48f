package hourglass_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass"
	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/codec"
	"github.com/hourglass-sched/hourglass/coord"
	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
	"github.com/hourglass-sched/hourglass/periodic"
	"github.com/hourglass-sched/hourglass/scheduler"
	"github.com/hourglass-sched/hourglass/worker"
)

// packagePrefixes are the prefixes no message may carry: the public
// packages say "hourglass: " instead.
var packagePrefixes = []string{"client:", "inspect:", "worker:", "periodic:", "coord:", "codec:", "shard:", ": scheduler:"}

// TestErrorMessagesSayHourglassOnce: the errors the public packages
// return (bad configs, bad ids and arguments, missing tasks and queues,
// invalid schedules, Redis out of reach, their sentinels) start with
// "hourglass: ", say it once, and name no package, also where they wrap
// a sentinel of package hourglass.
func TestErrorMessagesSayHourglassOnce(t *testing.T) {
	badScheduler := scheduler.DefaultConfig()
	badScheduler.Shards = -1
	idleConfig := scheduler.DefaultConfig()
	idleConfig.HTTP.Addr = ""
	idle, err := scheduler.New(idleConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	t.Parallel()
	e, c, in := deployment(t, "msg", client.Config{RetryFor: client.RetryForNone})
	ctx := testenv.Ctx(t, 30*time.Second)
	running := e.Popped(shardtest.Queue, "running-", 1)[0].Task.ID
	e.Schedule(shardtest.Queue, time.Hour, "later")
	// Nothing listens there: every call to it fails to connect.
	gone := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = gone.Close() })
	cGone, err := client.New(gone, client.Config{Namespace: "msg", Shards: 2, RetryFor: client.RetryForNone})
	if err != nil {
		t.Fatal(err)
	}
	inGone, err := inspect.New(gone, inspect.Config{Namespace: "msg", Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(e.RDB, worker.Config{Namespace: "msg", Shards: 2, RegistrationWait: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	h := func(context.Context, *worker.Task) error { return nil }
	if err := w.Handle("handled", h, worker.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	lock, err := coord.NewLock(e.RDB, "msg-lock", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	held, err := lock.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stale, err := coord.NewLock(e.RDB, "msg-stale", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	released, err := stale.TryAcquire(ctx)
	if err != nil || released.Release(ctx) != nil {
		t.Fatal(err)
	}
	enqueue := func(tk client.Task) error { _, err := c.Enqueue(ctx, tk); return err }
	second := func(_ any, err error) error { return err }
	valid := client.Task{ID: "v", Queue: shardtest.Queue}

	for _, tc := range []struct {
		name string
		err  error
	}{
		// client
		{"client.New without Redis", second(client.New(nil, client.Config{}))},
		{"client.New with bad Shards", second(client.New(e.RDB, client.Config{Shards: -1}))},
		{"client.New with a bad namespace", second(client.New(e.RDB, client.Config{Namespace: "a{b"}))},
		{"client.Config.Validate", client.Config{MaxPayload: -1}.Validate()},
		{"client Enqueue of a bad id", enqueue(client.Task{ID: "bad|id", Queue: shardtest.Queue})},
		{"client Enqueue to a bad queue name", enqueue(client.Task{ID: "x", Queue: "bad/name"})},
		{"client Enqueue with a negative delay", enqueue(client.Task{ID: "x", Queue: shardtest.Queue, Delay: -time.Second})},
		{"client Enqueue with bad retries", enqueue(client.Task{ID: "x", Queue: shardtest.Queue, MaxRetries: hourglass.Retries(-1)})},
		{"client Enqueue to an unknown queue", enqueue(client.Task{ID: "x", Queue: "nope"})},
		{"client Enqueue of a live id", enqueue(client.Task{ID: running, Queue: shardtest.Queue})},
		{"client Enqueue of a large payload", enqueue(client.Task{ID: "big", Queue: shardtest.Queue, Payload: make([]byte, 4096)})},
		{"client EnqueueBatch", second(c.EnqueueBatch(ctx, []client.Task{valid, {ID: "bad|id", Queue: shardtest.Queue}}))},
		{"client EnqueueOf with a Payload", second(client.EnqueueOf(ctx, c, client.Task{Queue: shardtest.Queue, Payload: []byte("x")}, 1))},
		{"client Encode of a channel", second(c.Encode(make(chan int)))},
		{"client Lookup of a missing task", second(c.Lookup(ctx, "missing"))},
		{"client Lookup of a bad id", second(c.Lookup(ctx, "bad|id"))},
		{"client Reschedule of a running task", second(c.Reschedule(ctx, running, time.Now().Add(time.Hour)))},
		{"client Cancel of a missing task", second(c.Cancel(ctx, "missing"))},
		{"client Exists of a bad id", second(c.Exists(ctx, ""))},
		{"client Lookup without Redis", second(cGone.Lookup(ctx, "x"))},
		{"client Enqueue without Redis", second(cGone.Enqueue(ctx, valid))},
		{"client.BatchError", &client.BatchError{Failed: 1, Total: 2, First: hourglass.ErrDuplicate}},
		// worker
		{"worker.New without Redis", second(worker.New(nil, worker.Config{}))},
		{"worker.New with a bad Config", second(worker.New(e.RDB, worker.Config{FetchTimeout: time.Millisecond}))},
		{"worker.New with bad Shards", second(worker.New(e.RDB, worker.Config{Shards: -1}))},
		{"worker Handle of a bad queue name", w.Handle("bad/name", h, worker.QueueOptions{})},
		{"worker Handle without a handler", w.Handle("q2", nil, worker.QueueOptions{})},
		{"worker Handle with bad options", w.Handle("q3", h, worker.QueueOptions{Concurrency: -1})},
		{"worker Handle twice", w.Handle("handled", h, worker.QueueOptions{})},
		{"worker Run of an unregistered queue", w.Run(ctx)},
		{"worker.ErrLeaseLost", worker.ErrLeaseLost},
		{"worker.ErrShuttingDown", worker.ErrShuttingDown},
		{"worker.ErrAlreadySettled", worker.ErrAlreadySettled},
		{"worker.ErrPayloadDecode", worker.ErrPayloadDecode},
		{"worker.ErrNotRegistered", worker.ErrNotRegistered},
		{"worker.ErrStaleToken", worker.ErrStaleToken},
		// inspect
		{"inspect.New without Redis", second(inspect.New(nil, inspect.Config{}))},
		{"inspect.New with bad Shards", second(inspect.New(e.RDB, inspect.Config{Shards: -1}))},
		{"inspect Task of a missing task", second(in.Task(ctx, "missing"))},
		{"inspect Task of a bad id", second(in.Task(ctx, "bad|id"))},
		{"inspect Reschedule of a running task", second(in.Reschedule(ctx, running, time.Now().Add(time.Hour)))},
		{"inspect Cancel of a missing task", second(in.Cancel(ctx, "missing"))},
		{"inspect Queue of an unknown queue", second(in.Queue(ctx, "nope"))},
		{"inspect Dead of a scheduled task", second(in.Dead(ctx, "later"))},
		{"inspect Replay of a missing task", in.Replay(ctx, "missing", time.Time{})},
		{"inspect ListTasks with a bad cursor", second(in.ListTasks(ctx, inspect.ListOptions{State: inspect.StateScheduled, Cursor: "x"}))},
		{"inspect ListTasks of a bad state", second(in.ListTasks(ctx, inspect.ListOptions{State: "odd"}))},
		{"inspect SetQueue of a bad name", in.SetQueue(ctx, "bad/name", inspect.Policy{})},
		{"inspect SetQueue with bad retries", in.SetQueue(ctx, "q", inspect.Policy{MaxRetries: hourglass.Retries(5000)})},
		{"inspect RemoveQueue of an unknown queue", in.RemoveQueue(ctx, "nope")},
		{"inspect Pause of an unknown queue", in.Pause(ctx, "nope")},
		{"inspect SetSchedule of an invalid schedule", in.SetSchedule(ctx, periodic.Schedule{Name: "s", Queue: shardtest.Queue})},
		{"inspect SetSchedule to an unknown queue", in.SetSchedule(ctx, periodic.Schedule{Name: "s", Queue: "nope", Interval: time.Minute})},
		{"inspect RemoveSchedule of an unknown schedule", in.RemoveSchedule(ctx, "nope")},
		{"inspect PauseSchedule of a bad name", in.PauseSchedule(ctx, "bad name")},
		{"inspect Resize to 0 shards", second(in.Resize(ctx, 0))},
		{"inspect Task without Redis", second(inGone.Task(ctx, "x"))},
		{"inspect Queues without Redis", second(inGone.Queue(ctx, "x"))},
		{"inspect.PartialError", &inspect.PartialError{Problems: []inspect.ShardProblem{{Shard: 1, Error: "WRONGTYPE"}}}},
		{"inspect.ErrResizeRunning", inspect.ErrResizeRunning},
		{"inspect.ErrPartial", inspect.ErrPartial},
		{"inspect.ErrNoEtcd", inspect.ErrNoEtcd},
		// periodic
		{"periodic Compile", second(periodic.Schedule{Name: "bad name", Queue: "q", Interval: time.Minute}.Compile())},
		{"periodic Decode", second(periodic.Decode("s", []byte("{")))},
		{"periodic.ErrInvalid", periodic.ErrInvalid},
		// codec
		{"codec.JSON Marshal", second(codec.JSON{}.Marshal(make(chan int)))},
		{"codec.JSON Unmarshal", codec.JSON{}.Unmarshal([]byte("{"), new(int))},
		// coord
		{"coord.NewLock with a bad name", second(coord.NewLock(e.RDB, "a{b", time.Minute))},
		{"coord.NewLock with a bad ttl", second(coord.NewLock(e.RDB, "l", time.Microsecond))},
		{"coord.NewSemaphore with a bad limit", second(coord.NewSemaphore(e.RDB, "s", 0, time.Minute))},
		{"coord TryAcquire of a held lock", second(lock.TryAcquire(ctx))},
		{"coord Release of a released lease", released.Release(ctx)},
		{"coord Extend with a bad ttl", held.Extend(ctx, time.Microsecond)},
		{"coord.ErrNotHeld", coord.ErrNotHeld},
		{"coord.ErrNotAcquired", coord.ErrNotAcquired},
		// scheduler
		{"scheduler.New with a bad shard count", second(scheduler.New(badScheduler))},
		{"scheduler.LoadSettings of a missing file", second(scheduler.LoadSettings(filepath.Join(t.TempDir(), "none.yaml")))},
		{"scheduler Ready cancelled", idle.Ready(cancelled)},
	} {
		if tc.err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		msg := tc.err.Error()
		switch {
		case !strings.HasPrefix(msg, "hourglass: "):
			t.Errorf("%s: %q does not start with \"hourglass: \"", tc.name, msg)
		case strings.Count(msg, "hourglass:") != 1:
			t.Errorf("%s: %q says \"hourglass:\" more than once", tc.name, msg)
		}
		for _, p := range packagePrefixes {
			if strings.Contains(msg, p) {
				t.Errorf("%s: %q names a package (%s)", tc.name, msg, p)
			}
		}
	}
}
