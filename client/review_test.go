package client_test

import (
	"errors"
	"fmt"
	"hash/crc32"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// Finding: Cancel and Lookup never meet the enqueue script's redirect; a
// client re-reads the layout at most every 5 s. A client that read it
// before a resize cancels in the task's old shard only: once the task has
// moved, Cancel says ErrNotFound and the task runs.
func TestReviewStaleClientCancelMissesAMovedTask(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb := r.Client(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	l, _ := shard.NewLayout("hourglass", 16)
	st := shard.NewStore(rdb, l)
	if err := st.RegisterQueues(ctx, map[string]shard.QueuePolicy{"emails": {MaxRetries: 1, Timeout: time.Second, MaxPayload: 1024}}); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(rdb, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var id string
	for i := 0; ; i++ {
		id = fmt.Sprint("order-", i)
		if crc32.ChecksumIEEE([]byte(id))%16 != crc32.ChecksumIEEE([]byte(id))%32 {
			break
		}
	}
	if _, err := c.Enqueue(ctx, client.Task{ID: id, Queue: "emails", Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	nl, err := st.BeginResize(ctx, 32)
	if err != nil {
		t.Fatal(err)
	}
	old := int(crc32.ChecksumIEEE([]byte(id)) % 16)
	res, err := st.Export(ctx, nl, old, 1, time.Second, []string{id})
	if err != nil || len(res.Tasks) != 1 {
		t.Fatalf("export %+v %v", res, err)
	}
	if _, err := st.Import(ctx, nl, nl.ShardOf(id), res.Tasks); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Commit(ctx, old, 1, []string{id}); err != nil {
		t.Fatal(err)
	}
	_, lerr := c.Lookup(ctx, id)
	cerr := c.Cancel(ctx, id)
	if errors.Is(cerr, client.ErrNotFound) {
		if info, err := st.Lookup(ctx, id); err == nil {
			t.Fatalf("BUG: Cancel(%s) = %v (Lookup: %v), but the task is %s in shard %d", id, cerr, lerr, info.State, nl.ShardOf(id))
		}
	}
}
