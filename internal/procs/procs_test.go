package procs

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestKeyAndNames(t *testing.T) {
	l, err := shard.NewLayout("ns1", 4)
	if err != nil {
		t.Fatal(err)
	}
	if Key("ns1") != l.Keys.Procs() {
		t.Fatalf("Key %q, the layout's %q", Key("ns1"), l.Keys.Procs())
	}
	if got := ConnName("ns1", "host a\x01é"); got != "hg|ns1|host_a___" {
		t.Fatalf("ConnName %q", got)
	}
}

// named returns a client of srv whose connections are named for process
// id of namespace "ns1", as the binaries' are.
func named(t *testing.T, addr, id string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, OnConnect: func(ctx context.Context, cn *redis.Conn) error {
		return cn.ClientSetName(ctx, ConnName("ns1", id)).Err()
	}})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestRegistryListsTheLive: a process's entry is written at start and
// when its busy slots change (not while they do not), listed while one of
// its connections is active, gone from the list when its connections
// close or stay quiet past the silence bound (and then deleted), and
// deleted when the process stops.
func TestRegistryListsTheLive(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	admin := srv.Client(t)
	ctx := testenv.Ctx(t, 60*time.Second)
	w := named(t, srv.Addr, "w1")
	// An entry of a process gone long ago, never listed since: the next
	// process to start deletes it.
	admin.HSet(ctx, Key("ns1"), "ancient", `{"id":"ancient","updated":"2020-01-01T00:00:00Z"}`)
	me := Self("w1", RoleWorker, "v1.2.3", map[string]int{"emails": 4, "hooks": 2})
	me.Named = true
	r := New(w, "ns1", me)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); r.Run(rctx, func(err error) { t.Errorf("registry: %v", err) }) }()
	list := func(silence time.Duration) []Process {
		ps, err := List(ctx, admin, "ns1", silence)
		if err != nil {
			t.Fatal(err)
		}
		return ps
	}
	testenv.WaitFor(t, 10*time.Second, "the entry written", func() (bool, string) {
		return admin.HExists(ctx, Key("ns1"), "w1").Val(), ""
	})
	if admin.HExists(ctx, Key("ns1"), "ancient").Val() {
		t.Fatal("the start left an entry not written for years")
	}
	testenv.WaitFor(t, 10*time.Second, "the worker listed", func() (bool, string) {
		ps := list(0)
		return len(ps) == 1 && ps[0].ID == "w1", fmt.Sprint(ps)
	})
	p := list(0)[0]
	if p.Role != RoleWorker || p.Version != "v1.2.3" || p.Slots != 6 || p.Queues["emails"] != 4 || p.PID == 0 || p.Host == "" || p.Conns < 1 {
		t.Fatalf("listed %+v", p)
	}
	calls := func() int64 { return testenv.CommandCalls(t, admin)["hset"] }
	before := calls()
	r.SetBusy(3)
	testenv.WaitFor(t, 2*MinWrite, "busy 3 written", func() (bool, string) {
		ps := list(0)
		return len(ps) == 1 && ps[0].Busy == 3, fmt.Sprint(ps)
	})
	// Changes within MinWrite are written together, once.
	r.SetBusy(1)
	r.SetBusy(2)
	testenv.WaitFor(t, 3*MinWrite, "busy 2 written", func() (bool, string) {
		ps := list(0)
		return len(ps) == 1 && ps[0].Busy == 2, fmt.Sprint(ps)
	})
	if n := calls() - before; n != 2 {
		t.Fatalf("%d writes for two rounds of changes, want 2", n)
	}
	// A process whose connections are quiet past the bound is not
	// listed; its entry stays (a listing writes nothing), and its next
	// command lists it again.
	// CLIENT LIST counts idle time in whole seconds: a bound of 1ns
	// leaves the process out once its connections have been quiet for one.
	testenv.WaitFor(t, 10*time.Second, "the quiet process left out under a bound of 1ns", func() (bool, string) {
		ps := list(time.Nanosecond)
		return len(ps) == 0, fmt.Sprint(ps)
	})
	if n := admin.HLen(ctx, Key("ns1")).Val(); n != 1 {
		t.Fatalf("a listing deleted the quiet process's entry: %d", n)
	}
	r.SetBusy(0)
	testenv.WaitFor(t, 3*MinWrite, "busy 0 written", func() (bool, string) {
		ps := list(0)
		return len(ps) == 1 && ps[0].Busy == 0, fmt.Sprint(ps)
	})
	// A killed process's connections close: it is not listed.
	w2 := named(t, srv.Addr, "w2")
	if err := w2.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	admin.HSet(ctx, Key("ns1"), "w2", fmt.Sprintf(`{"id":"w2","role":"worker","named":true,"updated":%q}`, time.Now().UTC().Format(time.RFC3339Nano)))
	if ps := list(0); len(ps) != 2 {
		t.Fatalf("listed %v, want w1 and w2", ps)
	}
	w2.Close()
	testenv.WaitFor(t, 10*time.Second, "the closed process gone", func() (bool, string) {
		ps := list(0)
		return len(ps) == 1 && ps[0].ID == "w1", fmt.Sprint(ps)
	})
	admin.HDel(ctx, Key("ns1"), "w2")
	stop()
	<-done
	if n := admin.HLen(ctx, Key("ns1")).Val(); n != 0 {
		t.Fatalf("the entry stayed after the registry stopped: %d", n)
	}
	// A process whose connections are not all named (an embedded worker
	// whose client names none) is listed while its entry is newer than
	// the bound, not after.
	admin.HSet(ctx, Key("ns1"), "lib", fmt.Sprintf(`{"id":"lib","role":"worker","updated":%q}`, time.Now().UTC().Format(time.RFC3339Nano)))
	if ps := list(0); len(ps) != 1 || ps[0].ID != "lib" || ps[0].Conns != 0 {
		t.Fatalf("listed %v, want lib, by its fresh entry", ps)
	}
	testenv.WaitFor(t, 5*time.Second, "lib left out once its entry is older than the bound", func() (bool, string) {
		ps := list(5 * time.Millisecond)
		return len(ps) == 0, fmt.Sprint(ps)
	})
}

// TestRefreshDue: a process whose connections are not all named writes
// its entry each BusyRefresh, changed or not; a named one only on
// changes and each Refresh.
func TestRefreshDue(t *testing.T) {
	r := New(nil, "ns1", Entry{ID: "x", Named: true})
	now := time.Now()
	r.last = now
	r.SetBusy(2)
	if d := r.due().Sub(now); d != Refresh {
		t.Fatalf("named: due in %v, want %v", d, Refresh)
	}
	r.e.Named = false
	if d := r.due().Sub(now); d != BusyRefresh {
		t.Fatalf("not named: due in %v, want %v", d, BusyRefresh)
	}
}
