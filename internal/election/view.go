package election

import (
	"context"
	"slices"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hourglass-sched/hourglass/internal/backoff"
)

// owner is a shard key as last seen in etcd.
type owner struct {
	replica   string
	lease     clientv3.LeaseID
	createRev int64 // the owner's fencing epoch
}

// view is the manager's local picture of the keys under the prefix. It
// is owned by the reconcile loop.
type view struct {
	prefix  string
	synced  bool  // a snapshot has been applied
	rev     int64 // etcd revision the view reflects
	members map[string]struct{}
	owners  map[int]owner
}

func newView(prefix string) *view {
	return &view{prefix: prefix, members: map[string]struct{}{}, owners: map[int]owner{}}
}

// viewUpdate is what the watcher sends to the reconcile loop: either a
// full snapshot (reset) or the events of one watch response.
type viewUpdate struct {
	reset  bool
	rev    int64
	kvs    []*mvccpb.KeyValue
	events []*clientv3.Event
}

func (v *view) apply(u viewUpdate) {
	if u.reset {
		clear(v.members)
		clear(v.owners)
		for _, kv := range u.kvs {
			v.put(kv)
		}
		v.synced = true
	}
	for _, ev := range u.events {
		switch ev.Type {
		case clientv3.EventTypePut:
			v.put(ev.Kv)
		case clientv3.EventTypeDelete:
			v.del(string(ev.Kv.Key))
		}
	}
	v.rev = max(v.rev, u.rev)
}

func (v *view) put(kv *mvccpb.KeyValue) {
	switch kind, id, shard := parseKey(v.prefix, string(kv.Key)); kind {
	case kindMember:
		v.members[id] = struct{}{}
	case kindShard:
		v.owners[shard] = owner{replica: string(kv.Value), lease: clientv3.LeaseID(kv.Lease), createRev: kv.CreateRevision}
	}
}

func (v *view) del(key string) {
	switch kind, id, shard := parseKey(v.prefix, key); kind {
	case kindMember:
		delete(v.members, id)
	case kindShard:
		delete(v.owners, shard)
	}
}

// sortedMembers returns the member IDs in ascending order.
func (v *view) sortedMembers() []string {
	out := make([]string, 0, len(v.members))
	for id := range v.members {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// watch keeps the reconcile loop's view current for one session: it
// reads everything under the prefix, sends it as a snapshot, then
// watches from the next revision so that no event is missed. When the
// watch ends (compaction, cancellation, lost leader) it starts over with a
// fresh snapshot. It returns when ctx ends.
func (m *Manager) watch(ctx context.Context, out chan<- viewUpdate) {
	send := func(u viewUpdate) bool {
		select {
		case out <- u:
			return true
		case <-ctx.Done():
			return false
		}
	}
	bo := &backoff.Backoff{Max: m.cfg.TTL / 4}
	for ctx.Err() == nil {
		gctx, cancel := context.WithTimeout(ctx, m.cfg.opTimeout())
		resp, err := m.cli.Get(gctx, m.cfg.Prefix, clientv3.WithPrefix())
		cancel()
		if err != nil {
			m.log.Debug("snapshot failed", "error", err)
			bo.Wait(ctx)
			continue
		}
		if !send(viewUpdate{reset: true, rev: resp.Header.Revision, kvs: resp.Kvs}) {
			return
		}
		wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := m.cli.Watch(wctx, m.cfg.Prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
		for wr := range wch {
			if err := wr.Err(); err != nil {
				m.log.Debug("watch ended, resyncing", "error", err)
				break
			}
			if len(wr.Events) == 0 {
				continue
			}
			bo.Reset()
			// The view's revision is the last event's, not the header's:
			// a catching-up watcher may get a header revision ahead of
			// the events delivered so far.
			rev := wr.Events[len(wr.Events)-1].Kv.ModRevision
			if !send(viewUpdate{rev: rev, events: wr.Events}) {
				break
			}
		}
		wcancel()
		for range wch {
			// Drain: the client closes the channel once wctx is done.
		}
		if ctx.Err() == nil {
			bo.Wait(ctx)
		}
	}
}
