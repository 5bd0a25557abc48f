package etcdowners_test

import (
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/inspect/etcdowners"
	"github.com/hourglass-sched/hourglass/internal/election"
	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestOwnersOfTheNamespace: an Inspector given a Reader lists each shard
// with the replica whose ownership key the election wrote under the
// namespace's prefix and, as its epoch, the key's create revision;
// unowned shards and another namespace's keys leave Owner empty.
func TestOwnersOfTheNamespace(t *testing.T) {
	t.Parallel()
	e := shardtest.New(t, shardtest.Options{Namespace: "own", Shards: 3})
	cli := testenv.StartEtcd(t).Client(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	put := func(key, val string) int64 {
		t.Helper()
		resp, err := cli.Put(ctx, key, val)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	rev0 := put(election.ShardKey(election.Prefix("own"), 0), "replica-a")
	rev2 := put(election.ShardKey(election.Prefix("own"), 2), "replica-b")
	put(election.ShardKey(election.Prefix("other"), 1), "replica-c")

	in, err := inspect.New(e.RDB, inspect.Config{Namespace: "own", Shards: 3, Owners: etcdowners.New(cli, "own")})
	if err != nil {
		t.Fatal(err)
	}
	ss, err := in.Shards(ctx)
	if err != nil || len(ss) != 3 {
		t.Fatalf("Shards: %+v, %v", ss, err)
	}
	want := []inspect.Owner{{Replica: "replica-a", Epoch: rev0}, {}, {Replica: "replica-b", Epoch: rev2}}
	for sh, w := range want {
		if got := (inspect.Owner{Replica: ss[sh].Owner, Epoch: ss[sh].Epoch}); got != w {
			t.Errorf("shard %d: owner %+v, want %+v", sh, got, w)
		}
	}
	if owners, err := etcdowners.New(cli, "").Owners(ctx); err != nil || len(owners) != 0 {
		t.Errorf("the default namespace's owners: %v, %v; want none", owners, err)
	}
}
