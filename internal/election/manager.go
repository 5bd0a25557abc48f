package election

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hourglass-sched/hourglass/internal/backoff"
	"github.com/hourglass-sched/hourglass/internal/shard"
)

// restartDelay is how long a shard whose RunFunc returned on its own is
// left alone before this replica campaigns for it again, so that a RunFunc
// that fails at once does not spin acquire/release in a tight loop.
const restartDelay = time.Second

// maxStaleLeases bounds the list of old leases whose revoke is retried.
const maxStaleLeases = 8

// RunFunc does a shard's work. It is called in its own goroutine when this
// replica wins shard `shard` with fencing epoch `epoch`; ctx is cancelled
// when ownership ends for any reason (rebalance, lease validity lost,
// shutdown). The manager waits for RunFunc to return before it gives the
// shard up in etcd, so RunFunc must return promptly once ctx is done;
// after validity loss it has the self-fencing margin to do so before
// another replica can own the shard. If RunFunc returns on its own (e.g.
// it saw a stale-epoch rejection), the manager releases the shard and may
// campaign again later.
type RunFunc func(ctx context.Context, shard int, epoch int64)

// Manager owns this replica's share of the shards. See the package
// documentation for the protocol.
type Manager struct {
	cli *clientv3.Client
	cfg Config
	run RunFunc
	log hclog.Logger
	met *metrics

	started atomic.Bool
	shards  atomic.Int64   // current shard count; see SetShards
	kick    chan struct{}  // capacity 1: reconcile soon (a RunFunc returned, the count changed)
	wg      sync.WaitGroup // RunFunc goroutines

	// mu guards the fields below. They are written only by Run's
	// goroutine, which therefore reads them without the lock.
	mu         sync.Mutex
	runs       map[int]*shardRun
	members    []string
	sess       *session
	registered bool // member key known to be in etcd for sess

	// Owned by Run's goroutine.
	view     *view
	cooldown map[int]time.Time  // shard -> earliest time to campaign again
	stale    []clientv3.LeaseID // old leases whose revoke is not confirmed
}

// New returns a Manager for cfg, with defaults filled in. It registers
// the metrics on cfg.Registerer when that is set.
func New(cli *clientv3.Client, cfg Config, run RunFunc) (*Manager, error) {
	if cli == nil {
		return nil, fmt.Errorf("%w: nil etcd client", ErrInvalidConfig)
	}
	if run == nil {
		return nil, fmt.Errorf("%w: nil RunFunc", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	met, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	m := &Manager{
		cli:      cli,
		cfg:      cfg,
		run:      run,
		log:      cfg.Logger.Named("election").With("replica", cfg.ReplicaID),
		met:      met,
		kick:     make(chan struct{}, 1),
		runs:     map[int]*shardRun{},
		cooldown: map[int]time.Time{},
	}
	m.shards.Store(int64(cfg.Shards))
	return m, nil
}

// SetShards changes the number of shards N that the replicas divide
// between them, for online resharding. It is safe to call from any
// goroutine, before or during Run. A count outside 1..shard.MaxShards is
// logged and ignored.
//
// The change takes effect at the next reconcile, which it triggers: quotas
// are computed from the new count; when it grows this replica campaigns
// for its share of the new shards, and when it shrinks this replica
// stops and releases every shard >= n it runs (cancel the RunFunc, wait
// for it to return, delete the key). Shards >= n owned by other replicas
// are left to them. Every replica must be given the same count; until
// they agree, quotas do not add up and ownership may move more than once.
func (m *Manager) SetShards(n int) {
	if n < 1 || n > shard.MaxShards {
		m.log.Warn("ignoring invalid shard count", "shards", n, "max", shard.MaxShards)
		return
	}
	if old := m.shards.Swap(int64(n)); old != int64(n) {
		m.log.Info("shard count changed", "from", old, "to", n)
	}
	m.poke()
}

// Shards returns the current shard count: Config.Shards, or the value of
// the last valid SetShards call.
func (m *Manager) Shards() int { return int(m.shards.Load()) }

// poke asks the reconcile loop to run soon, without blocking: a pending
// kick already covers this one.
func (m *Manager) poke() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// Owned returns a snapshot of the shards whose RunFunc is running with a
// live ctx, mapped to their epochs. Shards being stopped are not included.
func (m *Manager) Owned() map[int]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[int]int64, len(m.runs))
	for shard, r := range m.runs {
		if r.ctx.Err() == nil && !r.finished() {
			out[shard] = r.epoch
		}
	}
	return out
}

// Ready reports whether the replica holds a lease that is valid by the
// self-fencing clock and its member key is registered.
func (m *Manager) Ready() bool {
	m.mu.Lock()
	s, registered := m.sess, m.registered
	m.mu.Unlock()
	return s != nil && registered && s.valid()
}

// Members returns the replica IDs last seen in etcd, sorted.
func (m *Manager) Members() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.members)
}

// Run takes part in shard ownership until ctx is cancelled. It returns
// nil once shutdown is complete, or ErrAlreadyRunning if called twice.
//
// Shutdown order: cancel every RunFunc ctx, wait for every RunFunc to
// return, revoke the lease (which deletes the member key and all shard
// keys at once, so other replicas can take the shards immediately), stop
// and wait for the session's goroutines, return.
func (m *Manager) Run(ctx context.Context) error {
	if !m.started.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	defer m.wg.Wait()
	bo := &backoff.Backoff{Max: time.Second}
	for ctx.Err() == nil {
		s, err := m.startSession(ctx)
		if err != nil {
			if ctx.Err() == nil {
				m.log.Warn("cannot start session, retrying", "error", err)
				bo.Wait(ctx)
			}
			continue
		}
		bo.Reset()
		m.serve(ctx, s)
	}
	m.log.Info("stopped")
	return nil
}

// startSession grants a lease, registers the member key on it and starts
// the session's keep-alive, watchdog and watcher.
func (m *Manager) startSession(ctx context.Context) (*session, error) {
	op := m.cfg.opTimeout()
	sent := time.Now() // before sending: the server's expiry is later than sent+TTL
	gctx, cancel := context.WithTimeout(ctx, op)
	g, err := m.cli.Grant(gctx, m.cfg.leaseSeconds())
	cancel()
	if err != nil {
		return nil, fmt.Errorf("election: grant lease: %w", err)
	}
	ttl := min(m.cfg.TTL, time.Duration(g.TTL)*time.Second)
	s := newSession(ctx, g.ID, sent, ttl, m.cfg.margin())

	pctx, cancel := context.WithTimeout(ctx, op)
	_, err = m.cli.Put(pctx, MemberKey(m.cfg.Prefix, m.cfg.ReplicaID), m.cfg.ReplicaID, clientv3.WithLease(g.ID))
	cancel()
	if err == nil && !s.valid() {
		err = errValidityLost
	}
	if err != nil {
		s.end(nil)
		m.revokeOrRemember(g.ID)
		return nil, fmt.Errorf("election: register member: %w", err)
	}

	s.wg.Add(3)
	go func() { defer s.wg.Done(); m.keepAlive(s, ttl) }()
	go func() { defer s.wg.Done(); m.watchdog(s) }()
	go func() { defer s.wg.Done(); m.watch(s.ctx, s.updates) }()

	m.revokeStale()
	m.mu.Lock()
	m.sess, m.registered = s, true
	m.mu.Unlock()
	m.log.Info("session started", "lease", int64(g.ID))
	return s, nil
}

// serve is the reconcile loop of one session. It alone changes the
// ownership state; watch updates, returned RunFuncs and timers reach it
// through channels. It returns after the session has been torn down.
func (m *Manager) serve(ctx context.Context, s *session) {
	m.view = newView(m.cfg.Prefix)
	tick := time.NewTicker(m.cfg.TTL) // safety net
	defer tick.Stop()
	cool := time.NewTimer(time.Hour)
	cool.Stop()
	defer cool.Stop()
	for {
		select {
		case <-s.ctx.Done():
			m.teardown(ctx, s)
			return
		case u := <-s.updates:
			m.view.apply(u)
			members := m.view.sortedMembers()
			m.log.Debug("view updated", "rev", m.view.rev, "reset", u.reset, "events", len(u.events), "members", strings.Join(members, ","))
			m.mu.Lock()
			m.members = members
			m.mu.Unlock()
		case <-m.kick:
		case <-tick.C:
		case <-cool.C:
		}
		m.reconcile(s)
		m.armCooldown(cool)
	}
}

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

// register puts the member key back on the session's lease.
func (m *Manager) register(s *session) {
	m.mu.Lock()
	m.registered = false
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(s.ctx, m.cfg.opTimeout())
	defer cancel()
	if _, err := m.cli.Put(ctx, MemberKey(m.cfg.Prefix, m.cfg.ReplicaID), m.cfg.ReplicaID, clientv3.WithLease(s.lease)); err != nil {
		m.log.Warn("member key missing, re-register failed", "lease", int64(s.lease), "error", err)
		return
	}
	m.log.Warn("member key was missing, registered again", "lease", int64(s.lease))
	m.mu.Lock()
	m.registered = true
	m.mu.Unlock()
}

// armCooldown sets the timer to the earliest cooldown end, forgetting
// cooldowns that are over.
func (m *Manager) armCooldown(t *time.Timer) {
	now := time.Now()
	var next time.Time
	for shard, until := range m.cooldown {
		switch {
		case !until.After(now):
			delete(m.cooldown, shard)
		case next.IsZero() || until.Before(next):
			next = until
		}
	}
	if !next.IsZero() {
		t.Reset(next.Sub(now))
	}
}
