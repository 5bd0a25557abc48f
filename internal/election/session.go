package election

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// session is one lease of this replica and the goroutines that serve it:
// keep-alive, watchdog and watcher. Its ctx is cancelled when the lease's
// validity ends (watchdog, lease not found) or when Run's ctx ends; every
// RunFunc ctx of the session derives from it, so cancelling it stops all
// shard work at once.
type session struct {
	lease  clientv3.LeaseID
	margin time.Duration

	// base anchors validUntil on the monotonic clock: validUntil is the
	// conservative lease expiry as an offset from base.
	base       time.Time
	validUntil atomic.Int64

	ctx context.Context
	end context.CancelCauseFunc

	updates chan viewUpdate
	wg      sync.WaitGroup // keep-alive, watchdog, watcher
}

func newSession(parent context.Context, lease clientv3.LeaseID, sent time.Time, ttl, margin time.Duration) *session {
	s := &session{lease: lease, margin: margin, base: sent, updates: make(chan viewUpdate)}
	s.validUntil.Store(int64(ttl))
	s.ctx, s.end = context.WithCancelCause(parent)
	return s
}

// extend records a keep-alive that was sent at sent and answered: the
// server's new expiry is at least sent+ttl. validUntil only moves forward.
func (s *session) extend(sent time.Time, ttl time.Duration) {
	v := int64(sent.Sub(s.base) + ttl)
	for {
		cur := s.validUntil.Load()
		if v <= cur || s.validUntil.CompareAndSwap(cur, v) {
			return
		}
	}
}

// deadline is when the watchdog stops shard work: the conservative
// expiry minus the margin.
func (s *session) deadline() time.Time {
	return s.base.Add(time.Duration(s.validUntil.Load()) - s.margin)
}

// valid reports whether the lease is still valid by the self-fencing
// clock.
func (s *session) valid() bool {
	return s.ctx.Err() == nil && time.Now().Before(s.deadline())
}

// keepAlive renews the lease every TTL/3 with KeepAliveOnce, each call
// bounded by TTL/3, and moves validUntil to send time + TTL on success.
// clientv3's KeepAlive stream is not used: it hides failures behind
// retries and says nothing about how long the lease is surely valid.
func (m *Manager) keepAlive(s *session, ttl time.Duration) {
	interval := m.cfg.opTimeout()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		sent := time.Now()
		ctx, cancel := context.WithTimeout(s.ctx, interval)
		resp, err := m.cli.KeepAliveOnce(ctx, s.lease)
		cancel()
		switch {
		case err == nil:
			s.extend(sent, min(ttl, time.Duration(resp.TTL)*time.Second))
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			m.log.Warn("lease not found by etcd", "lease", int64(s.lease))
			s.end(errLeaseGone)
			return
		case s.ctx.Err() != nil:
			return
		case m.cli.Ctx().Err() != nil:
			m.log.Warn("etcd client closed, stopping shard work", "lease", int64(s.lease))
			s.end(ErrClientClosed)
			return
		default:
			m.log.Debug("keep-alive failed", "lease", int64(s.lease), "error", err)
		}
		t.Reset(time.Until(sent.Add(interval)))
	}
}

// watchdog ends the session when time reaches the deadline, re-reading
// it each time it wakes since keep-alives move it forward.
func (m *Manager) watchdog(s *session) {
	t := time.NewTimer(time.Until(s.deadline()))
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		if d := time.Until(s.deadline()); d > 0 {
			t.Reset(d)
			continue
		}
		m.log.Warn("lease validity lost, stopping shard work", "lease", int64(s.lease))
		s.end(errValidityLost)
		return
	}
}

// teardown ends a session: every RunFunc ctx is already cancelled (they
// derive from the session's); wait for all of them, then revoke the lease
// and wait for the session's goroutines.
func (m *Manager) teardown(ctx context.Context, s *session) {
	shutdown := ctx.Err() != nil
	m.mu.Lock()
	m.registered = false
	m.mu.Unlock()
	change := changeLost
	if shutdown {
		change = changeReleased
	}
	for _, shard := range slices.Sorted(maps.Keys(m.runs)) {
		r := m.runs[shard]
		m.wait(r)
		m.removeRun(r, change)
	}
	if shutdown {
		m.log.Info("shutting down, revoking lease", "lease", int64(s.lease))
	} else {
		m.met.leaseLost.Inc()
		m.log.Warn("lease lost, starting over", "lease", int64(s.lease), "cause", context.Cause(s.ctx))
	}
	m.revokeOrRemember(s.lease)
	s.wg.Wait()
	m.mu.Lock()
	m.sess = nil
	m.mu.Unlock()
}

// revokeOrRemember revokes lease; if that fails it is retried after the
// next lease is granted (a keep-alive delivered late may have renewed
// it, keeping our old keys, which block other replicas, alive).
func (m *Manager) revokeOrRemember(lease clientv3.LeaseID) {
	if err := m.revoke(lease); err != nil {
		m.log.Debug("revoke failed, will retry", "lease", int64(lease), "error", err)
		m.stale = append(m.stale, lease)
		if len(m.stale) > maxStaleLeases {
			m.stale = m.stale[len(m.stale)-maxStaleLeases:]
		}
	}
}

// revokeStale retries the revokes that failed before.
func (m *Manager) revokeStale() {
	m.stale = slices.DeleteFunc(m.stale, func(l clientv3.LeaseID) bool { return m.revoke(l) == nil })
}

// revoke revokes lease within opTimeout. A lease that is already gone
// counts as revoked. It does not use Run's ctx, which is cancelled at
// shutdown, exactly when the revoke matters most.
func (m *Manager) revoke(lease clientv3.LeaseID) error {
	if m.cli.Ctx().Err() != nil {
		return ErrClientClosed
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.opTimeout())
	defer cancel()
	_, err := m.cli.Revoke(ctx, lease)
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("election: revoke lease %x: %w", int64(lease), err)
	}
	return nil
}
