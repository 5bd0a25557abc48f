package election

import (
	"context"
	"fmt"
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
// nil once shutdown is complete, ErrAlreadyRunning if called twice, or
// ErrClientClosed after its shard work stopped because the etcd client
// was closed underneath it.
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
		if m.cli.Ctx().Err() != nil {
			m.log.Warn("etcd client closed, stopped")
			return ErrClientClosed
		}
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
