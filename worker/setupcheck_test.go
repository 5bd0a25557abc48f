package worker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestSetupRecheckedOnControlChannelEvents: a running worker checks the
// registrations again on every event of its control-channel subscription
// (here, the confirmation after Redis dropped its pub/sub connections),
// not only every setupCheckEvery (5 min): a registration lost meanwhile
// shows at once.
func TestSetupRecheckedOnControlChannelEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardtest.Policy())
	_, reg, _ := e.start(e.RDB, QueueOptions{Concurrency: 1}, func(context.Context, *Task) error { return nil })
	testenv.WaitFor(t, 20*time.Second, "queue seen registered", func() (bool, string) {
		got := gauge(t, reg, "hourglass_worker_queue_registered")
		return got == 1, fmt.Sprint("registered ", got)
	})
	ctx := testenv.Ctx(t, 30*time.Second)
	if err := e.RDB.HDel(ctx, e.Layout().Queues(0), "q").Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.RDB.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "the lost registration noticed", func() (bool, string) {
		got := gauge(t, reg, "hourglass_worker_queue_registered")
		return got == 0, fmt.Sprint("registered ", got)
	})
}
