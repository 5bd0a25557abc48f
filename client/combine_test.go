package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestConcurrentEnqueuesShareARoundTrip: Enqueue calls and small
// EnqueueBatch calls made while one is in flight (Redis paused under it)
// wait, then go as one batch; each gets its own result, the second of two
// calls with one id a duplicate, as two calls would. A batch of more than
// combineMax tasks goes alone.
func TestConcurrentEnqueuesShareARoundTrip(t *testing.T) {
	t.Parallel()
	r := testenv.StartRedis(t)
	rdb := r.Client(t)
	l, _ := shard.NewLayout("hourglass", 16)
	if err := shard.NewStore(rdb, l).RegisterQueues(context.Background(), map[string]shard.QueuePolicy{
		"emails": {MaxRetries: 3, Timeout: 30 * time.Second, MaxPayload: 1 << 10},
	}); err != nil {
		t.Fatal(err)
	}
	c, err := New(rdb, Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Ctx(t, time.Minute)
	ids := []string{"first"}
	for i := range 20 {
		ids = append(ids, fmt.Sprint("c", i))
	}
	ids = append(ids, "c5") // a second call with the same id
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	enqueue := func(i int) {
		wg.Go(func() {
			_, errs[i] = c.Enqueue(ctx, Task{ID: ids[i], Queue: "emails", Delay: time.Hour, Payload: []byte(ids[i])})
		})
	}
	// One call first: the client reads the layout and opens a connection
	// before Redis is paused.
	if _, err := c.Enqueue(ctx, Task{ID: "warm", Queue: "emails", Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	r.Pause()
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			r.Resume()
		}
	})
	enqueue(0)
	testenv.WaitFor(t, 10*time.Second, "the first call in flight", func() (bool, string) { return !c.small.Idle(), "not sent" })
	for i := 1; i < len(ids); i++ {
		enqueue(i)
	}
	task := func(id string) Task { return Task{ID: id, Queue: "emails", Delay: time.Hour, Payload: []byte(id)} }
	small := []Task{task("s1"), task("s2")}
	var large []Task
	for i := range combineMax + 1 {
		large = append(large, task(fmt.Sprint("l", i)))
	}
	var smallErr, largeErr error
	wg.Go(func() { _, smallErr = c.EnqueueBatch(ctx, small) })
	wg.Go(func() { _, largeErr = c.EnqueueBatch(ctx, large) })
	testenv.WaitFor(t, 10*time.Second, "the other calls waiting", func() (bool, string) {
		n := c.small.Waiting()
		return n == len(ids), fmt.Sprintf("%d waiting", n)
	})
	r.Resume()
	resumed = true
	wg.Wait()
	if smallErr != nil || largeErr != nil {
		t.Errorf("EnqueueBatch: small %v, large %v", smallErr, largeErr)
	}
	for _, tk := range append(small, large...) {
		ids = append(ids, tk.ID)
	}

	dups := 0
	for i, err := range errs {
		switch {
		case errors.Is(err, ErrDuplicate) && ids[i] == "c5":
			dups++
		case err != nil:
			t.Errorf("Enqueue(%s): %v", ids[i], err)
		}
	}
	if dups != 1 {
		t.Errorf("%d of the two calls with id c5 reported a duplicate, want one", dups)
	}
	for _, id := range ids {
		if info, err := c.Lookup(ctx, id); err != nil || string(info.Payload) != id {
			t.Errorf("Lookup(%s): %+v, %v", id, info, err)
		}
	}
	if !c.small.Idle() {
		t.Error("combiner busy after every call returned")
	}
}
