package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass"
	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// newClientEnv is newEnv with a client of its namespace.
func newClientEnv(t *testing.T, policy shard.QueuePolicy) (*env, *client.Client) {
	t.Helper()
	e := newEnv(t, policy)
	cl, err := client.New(e.RDB, client.Config{Namespace: ns, Shards: shards})
	if err != nil {
		t.Fatal(err)
	}
	return e, cl
}

// TestResultAndWait (#27): in a queue that keeps records of its ended
// tasks, a handler's result is kept with the task's final state, and
// client.Wait, called before the task runs, returns it once the task
// succeeded, was dead-lettered or was cancelled; client.Result reads the
// same afterwards. A result over MaxResult is refused.
func TestResultAndWait(t *testing.T) {
	t.Parallel()
	e, cl := newClientEnv(t, shard.QueuePolicy{MaxRetries: 0, Timeout: 30 * time.Second, Retention: shard.Retention{Age: time.Minute}})
	release := make(chan struct{})
	var mu sync.Mutex
	var tooLarge error
	e.start(e.RDB, QueueOptions{}, func(ctx context.Context, task *Task) error {
		switch task.ID {
		case "fails":
			return errors.New("no such order")
		case "long":
			<-ctx.Done()
			return ctx.Err()
		}
		<-release
		mu.Lock()
		tooLarge = task.SetResult(make([]byte, MaxResult+1))
		mu.Unlock()
		return task.SetResult([]byte("done:" + task.ID))
	})
	ctx := testenv.Ctx(t, 30*time.Second)
	type waited struct {
		info hourglass.TaskInfo
		err  error
	}
	waits := map[string]chan waited{}
	for _, id := range []string{"ok", "fails", "long"} {
		if _, err := cl.Enqueue(ctx, client.Task{ID: id, Queue: "q"}); err != nil {
			t.Fatal(err)
		}
		ch := make(chan waited, 1)
		waits[id] = ch
		go func() {
			info, err := cl.Wait(ctx, id)
			ch <- waited{info, err}
		}()
	}
	testenv.WaitFor(t, 10*time.Second, "the long task running", func() (bool, string) {
		info, err := cl.Lookup(ctx, "long")
		return err == nil && info.State == hourglass.StateActive, string(info.State)
	})
	if _, err := cl.Result(ctx, "ok"); !errors.Is(err, client.ErrNotFinished) {
		t.Errorf("Result of a task not run yet: %v, want ErrNotFinished", err)
	}
	close(release)
	if _, err := cl.Cancel(ctx, "long"); err != nil {
		t.Fatal(err)
	}
	want := map[string]func(hourglass.TaskInfo) bool{
		"ok": func(i hourglass.TaskInfo) bool {
			return i.State == hourglass.StateSucceeded && string(i.Result) == "done:ok" && !i.Ended.IsZero()
		},
		"fails": func(i hourglass.TaskInfo) bool {
			return i.State == hourglass.StateDead && i.LastError == "no such order"
		},
		"long": func(i hourglass.TaskInfo) bool { return i.State == hourglass.StateCancelled && i.Queue == "q" },
	}
	for id, ok := range want {
		select {
		case w := <-waits[id]:
			if w.err != nil || !ok(w.info) {
				t.Errorf("Wait(%s): %+v, %v", id, w.info, w.err)
			}
		case <-ctx.Done():
			t.Fatalf("Wait(%s) did not return", id)
		}
		if info, err := cl.Result(ctx, id); err != nil || !ok(info) {
			t.Errorf("Result(%s): %+v, %v", id, info, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if !errors.Is(tooLarge, ErrResultTooLarge) {
		t.Errorf("SetResult of %d bytes: %v, want ErrResultTooLarge", MaxResult+1, tooLarge)
	}
}

// TestResultNotKept: in a queue without a retention, SetResult says the
// result would be dropped, Wait refuses (a success could not be told from
// an absence), and the task is gone once it succeeded.
func TestResultNotKept(t *testing.T) {
	t.Parallel()
	e, cl := newClientEnv(t, shard.QueuePolicy{MaxRetries: 3, Timeout: 30 * time.Second})
	ctx := testenv.Ctx(t, 30*time.Second)
	if _, err := cl.Enqueue(ctx, client.Task{ID: "x", Queue: "q", Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Wait(ctx, "x"); !errors.Is(err, client.ErrNotKept) || !strings.Contains(err.Error(), "queues.q.retention") {
		t.Errorf("Wait in a queue that keeps nothing: %v, want ErrNotKept naming the setting", err)
	}
	if _, err := cl.Reschedule(ctx, "x", time.Now()); err != nil {
		t.Fatal(err)
	}
	set := make(chan error, 1)
	e.start(e.RDB, QueueOptions{}, func(ctx context.Context, task *Task) error {
		set <- task.SetResult([]byte("r"))
		return nil
	})
	if err := <-set; !errors.Is(err, ErrNotKept) {
		t.Errorf("SetResult: %v, want ErrNotKept", err)
	}
	testenv.WaitFor(t, 10*time.Second, "the task gone", func() (bool, string) {
		_, err := cl.Result(ctx, "x")
		return errors.Is(err, client.ErrNotFound), fmt.Sprint(err)
	})
	// A retention registered while the worker runs is announced: its
	// next task's result is kept, with no restart.
	if err := e.Store.RegisterQueues(ctx, map[string]shard.QueuePolicy{"q": {MaxRetries: 3, Timeout: 30 * time.Second,
		Retention: shard.Retention{Age: time.Minute}}}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "the worker told of the retention", func() (bool, string) {
		if _, err := cl.Enqueue(ctx, client.Task{Queue: "q", ID: "probe"}); err != nil {
			return false, err.Error()
		}
		err := <-set
		info, rerr := cl.Wait(ctx, "probe")
		if rerr != nil && !errors.Is(rerr, client.ErrNotFound) {
			t.Fatal(rerr)
		}
		return err == nil && string(info.Result) == "r", fmt.Sprint(err)
	})
}

// TestWaitsShareOneSubscription: the Waits of one client share one
// subscription per task (Redis counts one subscriber of each task's done
// channel however many Waits want it), every one returns the task's
// result, and the channels are unsubscribed once they returned.
func TestWaitsShareOneSubscription(t *testing.T) {
	t.Parallel()
	e, cl := newClientEnv(t, shard.QueuePolicy{MaxRetries: 3, Timeout: 30 * time.Second, Retention: shard.Retention{Age: time.Minute}})
	release := make(chan struct{})
	e.start(e.RDB, QueueOptions{}, func(ctx context.Context, task *Task) error {
		<-release
		return task.SetResult([]byte("r:" + task.ID))
	})
	ctx := testenv.Ctx(t, 30*time.Second)
	const ids, each = 10, 3
	var channels []string
	errs := make(chan error, ids*each)
	for i := range ids {
		id := fmt.Sprintf("w%d", i)
		channels = append(channels, e.Store.Keys().Done(id))
		if _, err := cl.Enqueue(ctx, client.Task{ID: id, Queue: "q"}); err != nil {
			t.Fatal(err)
		}
		for range each {
			go func() {
				info, err := cl.Wait(ctx, id)
				if err == nil && string(info.Result) != "r:"+id {
					err = fmt.Errorf("Wait(%s) = %+v", id, info)
				}
				errs <- err
			}()
		}
	}
	testenv.WaitFor(t, 10*time.Second, "each task's channel subscribed once", func() (bool, string) {
		n, err := e.RDB.PubSubNumSub(ctx, channels...).Result()
		for _, c := range channels {
			if err != nil || n[c] != 1 {
				return false, fmt.Sprint(n, err)
			}
		}
		return true, ""
	})
	close(release)
	for range ids * each {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	testenv.WaitFor(t, 10*time.Second, "the done channels unsubscribed", func() (bool, string) {
		left, err := e.RDB.PubSubChannels(ctx, e.Store.Keys().DonePrefix()+"*").Result()
		return err == nil && len(left) == 0, fmt.Sprint(left, err)
	})
}
