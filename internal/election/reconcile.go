package election

// The reconcile loop's moves: what serve does on each wake-up to bring
// this replica to its quota (acquire, release, drop lost shards).

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// reconcile moves this replica towards its quota.
func (m *Manager) reconcile(s *session) {
	if s.ctx.Err() != nil {
		return
	}
	m.reapReturned(s)
	if !m.view.synced {
		return
	}
	m.dropLost(s)
	n := m.Shards() // one count for the whole pass
	m.releaseBeyond(s, n)
	members := m.view.sortedMembers()
	me := slices.Index(members, m.cfg.ReplicaID)
	if me < 0 {
		// Our member key vanished while the lease is valid (deleted by
		// hand, or a late write on an old lease replaced it). Put it back
		// rather than read quota 0 and release everything.
		m.register(s)
		return
	}
	q := quota(n, len(members), me)
	if extra := len(m.runs) - q; extra > 0 {
		m.releaseExtras(s, extra)
	}
	m.deleteOrphans(s)
	if len(m.runs) < q && m.Ready() {
		m.acquire(s, n, q, len(members), me)
	}
}

// reapReturned releases shards whose RunFunc returned on its own.
func (m *Manager) reapReturned(s *session) {
	for _, shard := range slices.Sorted(maps.Keys(m.runs)) {
		r := m.runs[shard]
		if !r.finished() || r.ctx.Err() != nil {
			continue
		}
		m.log.Info("shard work returned, releasing", "shard", shard, "epoch", r.epoch)
		m.removeRun(r, changeReleased)
		m.deleteKey(s, shard, r.epoch)
		m.cooldown[shard] = time.Now().Add(restartDelay)
	}
}

// dropLost stops shard work whose key etcd no longer holds for us.
// Only keys the view has caught up with (view.rev >= epoch) are judged.
func (m *Manager) dropLost(s *session) {
	for _, shard := range slices.Sorted(maps.Keys(m.runs)) {
		r := m.runs[shard]
		if m.view.rev < r.epoch {
			continue
		}
		o, ok := m.view.owners[shard]
		if ok && o.replica == m.cfg.ReplicaID && o.lease == s.lease && o.createRev == r.epoch {
			continue
		}
		m.log.Warn("shard key no longer ours, stopping", "shard", shard, "epoch", r.epoch)
		r.cancel()
		m.wait(r)
		m.removeRun(r, changeLost)
	}
}

// releaseBeyond gives up the shards >= n that this replica runs, after
// the shard count shrank to n.
func (m *Manager) releaseBeyond(s *session, n int) {
	var beyond []int
	for _, sh := range slices.Sorted(maps.Keys(m.runs)) {
		if sh >= n {
			beyond = append(beyond, sh)
		}
	}
	if len(beyond) > 0 {
		m.release(s, beyond, "released shard beyond the shard count", "shards", n)
	}
}

// releaseExtras gives up the n highest-numbered shards.
func (m *Manager) releaseExtras(s *session, n int) {
	shards := slices.Sorted(maps.Keys(m.runs))
	m.release(s, shards[len(shards)-n:], "released shard for balance")
}

// release gives up running shards of our own accord: cancel every
// RunFunc first (so they stop in parallel), then for each wait for it to
// return, forget it and only then delete its key, logging msg with args.
// This is the one sequence by which this replica hands a running shard
// back; the key outlives the work, never the reverse.
func (m *Manager) release(s *session, shards []int, msg string, args ...any) {
	for _, shard := range shards {
		m.runs[shard].cancel()
	}
	for _, shard := range shards {
		r := m.runs[shard]
		m.wait(r)
		m.removeRun(r, changeReleased)
		m.deleteKey(s, shard, r.epoch)
		m.log.Info(msg, append([]any{"shard", shard, "epoch", r.epoch}, args...)...)
	}
}

// deleteOrphans deletes shard keys on our current lease that no RunFunc
// runs for: left by an acquire whose answer timed out or a delete that
// failed. Keys on our older leases are not ours and are left to expire.
// reconcile calls it after releaseBeyond, so no RunFunc runs for a shard
// beyond the shard count and our keys for such shards go too.
func (m *Manager) deleteOrphans(s *session) {
	for shard, o := range m.view.owners {
		if o.replica == m.cfg.ReplicaID && o.lease == s.lease && m.runs[shard] == nil {
			m.deleteKey(s, shard, o.createRev)
		}
	}
}

// acquire tries free shards among the n, preferred ones first, until
// the quota is met. Each try is one non-blocking txn; a shard someone
// else holds is simply skipped, and the next watch event brings the next
// chance.
func (m *Manager) acquire(s *session, n, q, r, me int) {
	now := time.Now()
	free := func(shard int) bool {
		_, running := m.runs[shard]
		_, owned := m.view.owners[shard]
		return !running && !owned && !now.Before(m.cooldown[shard])
	}
	for _, shard := range candidates(n, r, me, free) {
		if len(m.runs) >= q || !s.valid() {
			return
		}
		epoch, ok, err := m.tryAcquire(s, shard)
		if err != nil {
			if s.ctx.Err() == nil {
				m.log.Warn("acquire failed", "shard", shard, "error", err)
			}
			return
		}
		if !ok {
			continue // taken meanwhile; the watch will show by whom
		}
		m.view.owners[shard] = owner{replica: m.cfg.ReplicaID, lease: s.lease, createRev: epoch}
		if !s.valid() {
			// The etcd trap "a campaign that returns after the session
			// died": the key is on a lease we no longer trust, so no work
			// starts. Teardown revokes the lease and the key with it.
			if errors.Is(context.Cause(s.ctx), context.Canceled) {
				m.log.Debug("acquired while shutting down, not starting", "shard", shard, "epoch", epoch)
			} else {
				m.log.Warn("acquired after lease validity ended, not starting", "shard", shard, "epoch", epoch)
			}
			return
		}
		m.start(s, shard, epoch)
	}
}

// tryAcquire creates the shard key on our lease if it does not exist. The
// epoch is the txn's revision, which is the key's CreateRevision.
func (m *Manager) tryAcquire(s *session, shard int) (epoch int64, ok bool, err error) {
	key := ShardKey(m.cfg.Prefix, shard)
	ctx, cancel := context.WithTimeout(s.ctx, m.cfg.opTimeout())
	defer cancel()
	resp, err := m.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, m.cfg.ReplicaID, clientv3.WithLease(s.lease))).
		Commit()
	if err != nil {
		return 0, false, fmt.Errorf("election: acquire shard %d: %w", shard, err)
	}
	return resp.Header.Revision, resp.Succeeded, nil
}

// deleteKey deletes a shard key only if it is still ours: our value, our
// current lease and the epoch we held.
func (m *Manager) deleteKey(s *session, shard int, epoch int64) {
	key := ShardKey(m.cfg.Prefix, shard)
	ctx, cancel := context.WithTimeout(s.ctx, m.cfg.opTimeout())
	defer cancel()
	_, err := m.cli.Txn(ctx).
		If(
			clientv3.Compare(clientv3.Value(key), "=", m.cfg.ReplicaID),
			clientv3.Compare(clientv3.LeaseValue(key), "=", s.lease),
			clientv3.Compare(clientv3.CreateRevision(key), "=", epoch),
		).
		Then(clientv3.OpDelete(key)).
		Commit()
	if err != nil {
		// The key stays on our lease; deleteOrphans retries, and the
		// lease's end removes it in any case.
		m.log.Warn("release failed", "shard", shard, "epoch", epoch, "error", err)
		return
	}
	// Deleted, or it was not ours anyway: either way it is no longer
	// ours. If someone else holds it the watch will say so.
	if o, ok := m.view.owners[shard]; ok && o.createRev == epoch {
		delete(m.view.owners, shard)
	}
}
