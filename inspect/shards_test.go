package inspect_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// ownersFunc is an inspect.OwnerReader.
type ownersFunc func(context.Context) (map[int]inspect.Owner, error)

func (f ownersFunc) Owners(ctx context.Context) (map[int]inspect.Owner, error) { return f(ctx) }

// TestShardsOwnersFromReader: Shards fills each shard's owner and epoch
// from Config.Owners, ignores owners of shards it does not list, leaves
// them empty without a reader, and when the reader fails returns the
// table read from Redis with an error wrapping the reader's.
func TestShardsOwnersFromReader(t *testing.T) {
	t.Parallel()
	e, bare := newInspector(t, 2)
	ctx := testenv.Ctx(t, 10*time.Second)
	owners := map[int]inspect.Owner{1: {Replica: "r1", Epoch: 7}, 5: {Replica: "gone", Epoch: 1}}
	var fail error
	in, err := inspect.New(e.RDB, inspect.Config{Namespace: "insp", Shards: 2,
		Owners: ownersFunc(func(context.Context) (map[int]inspect.Owner, error) { return owners, fail })})
	if err != nil {
		t.Fatal(err)
	}
	ss, err := in.Shards(ctx)
	if err != nil || len(ss) != 2 || ss[0].Owner != "" || ss[0].Epoch != 0 || ss[1].Owner != "r1" || ss[1].Epoch != 7 {
		t.Fatalf("Shards: %+v, %v; want shard 1 owned by r1 at epoch 7", ss, err)
	}
	if ss, err := bare.Shards(ctx); err != nil || ss[1].Owner != "" {
		t.Errorf("Shards without Owners: %+v, %v", ss, err)
	}
	fail = errors.New("etcd unreachable")
	ss, err = in.Shards(ctx)
	if !errors.Is(err, fail) || len(ss) != 2 {
		t.Errorf("Shards with a failing reader: %+v, %v; want the table and the reader's error", ss, err)
	}
}
