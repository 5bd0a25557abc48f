package election

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The key layout, all under Config.Prefix:
//
//	<Prefix>members/<ReplicaID>  value ReplicaID, on the replica's lease
//	<Prefix>shards/<%04d shard>  value owner's ReplicaID, on the owner's lease
const (
	membersDir = "members/"
	shardsDir  = "shards/"
)

// Prefix is the election prefix of a deployment's namespace: the
// schedulers elect under "/<namespace>/".
func Prefix(namespace string) string { return "/" + namespace + "/" }

// MemberKey is the key that registers replica id as a member.
func MemberKey(prefix, id string) string { return prefix + membersDir + id }

// ShardKey is the ownership key of shard.
func ShardKey(prefix string, shard int) string {
	return fmt.Sprintf("%s%s%04d", prefix, shardsDir, shard)
}

// keyKind tells what a key under the prefix is.
type keyKind int

const (
	kindOther keyKind = iota
	kindMember
	kindShard
)

// parseKey classifies key. For a member key it returns the replica ID, for
// a shard key the shard number.
func parseKey(prefix, key string) (kind keyKind, id string, shard int) {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return kindOther, "", 0
	}
	if id, ok := strings.CutPrefix(rest, membersDir); ok && id != "" {
		return kindMember, id, 0
	}
	if num, ok := strings.CutPrefix(rest, shardsDir); ok {
		n, err := strconv.Atoi(num)
		if err == nil && n >= 0 {
			return kindShard, "", n
		}
	}
	return kindOther, "", 0
}

// Owner describes the current holder of a shard as stored in etcd.
type Owner struct {
	// Replica is the owner's ReplicaID.
	Replica string
	// Epoch is the fencing epoch: the shard key's CreateRevision.
	Epoch int64
	// Lease is the etcd lease the key is attached to.
	Lease int64
}

// Owners reads the shard owners under prefix from etcd, keyed by shard.
// Unowned shards are absent. It is meant for admin tools and tests.
func Owners(ctx context.Context, cli *clientv3.Client, prefix string) (map[int]Owner, error) {
	resp, err := cli.Get(ctx, prefix+shardsDir, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("election: read owners: %w", err)
	}
	out := make(map[int]Owner, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if kind, _, shard := parseKey(prefix, string(kv.Key)); kind == kindShard {
			out[shard] = Owner{Replica: string(kv.Value), Epoch: kv.CreateRevision, Lease: kv.Lease}
		}
	}
	return out, nil
}

// quota is how many of n shards the replica at index me of r sorted
// members should own: n/r, plus one for the first n%r members. Quotas of
// all members add up to n. A replica that is not a member (me < 0) gets 0.
func quota(n, r, me int) int {
	if me < 0 || me >= r {
		return 0
	}
	q := n / r
	if me < n%r {
		q++
	}
	return q
}

// candidates lists the shards in [0,n) for which free returns true, in
// the order a replica at index me of r should try them: first those with
// shard%r == me (so that replicas starting together mostly ask for
// different shards), then the others, each group ascending.
func candidates(n, r, me int, free func(shard int) bool) []int {
	var preferred, others []int
	for s := range n {
		if !free(s) {
			continue
		}
		if r > 0 && s%r == me {
			preferred = append(preferred, s)
		} else {
			others = append(others, s)
		}
	}
	return slices.Concat(preferred, others)
}
