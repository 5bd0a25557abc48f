// Package etcdowners reads the shards' owners from the schedulers'
// election in etcd, for package inspect (Config.Owners). It is a package
// of its own so that only a program that asks for owners links etcd's
// client and gRPC; inspect alone reads queues, tasks and shards from
// Redis.
package etcdowners

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/election"
	"github.com/hourglass-sched/hourglass/internal/shard"
)

// Reader reads shard owners with an etcd client. It is safe for
// concurrent use.
type Reader struct {
	cli    *clientv3.Client
	prefix string
}

// New returns a Reader of the election of the deployment named
// namespace (inspect.Config.Namespace; "" means "hourglass"), whose
// schedulers elect under the etcd prefix "/<namespace>/", with cli,
// which stays the caller's to close. It does no I/O.
func New(cli *clientv3.Client, namespace string) *Reader {
	if namespace == "" {
		namespace = shard.DefaultNamespace
	}
	return &Reader{cli: cli, prefix: election.Prefix(namespace)}
}

// Owners returns the owner of every owned shard, by shard.
func (r *Reader) Owners(ctx context.Context) (map[int]inspect.Owner, error) {
	owners, err := election.Owners(ctx, r.cli, r.prefix)
	if err != nil {
		return nil, fmt.Errorf("etcdowners: %w", err)
	}
	out := make(map[int]inspect.Owner, len(owners))
	for sh, o := range owners {
		out[sh] = inspect.Owner{Replica: o.Replica, Epoch: o.Epoch}
	}
	return out, nil
}
