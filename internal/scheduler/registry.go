package scheduler

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/hourglass-sched/hourglass/internal/backoff"
	"github.com/hourglass-sched/hourglass/internal/fanout"
	"github.com/hourglass-sched/hourglass/periodic"
)

// watchSchedules keeps the firer's schedules current until ctx ends: the
// configured ones, and those registered at run time (inspect.SetSchedule)
// whose names the configuration does not use, re-read when a change is
// announced on the control channel and every registryEvery. The same
// subscription follows the layout record (checkLayout): one pub/sub
// connection for both. Every event of the subscription, its
// (re)subscription confirmations included, also asks watchRegistry to
// check the registration marker: announcements are lost only while the
// subscription is down, and a Redis that comes back without its data
// comes back with a new confirmation, so the periodic re-reads are only a
// safety net. After a change of the layout it registers the
// configured queues in the shards of the new count: a queue this replica
// registered by the old count while the change was set up would miss
// them.
func (s *Scheduler) watchSchedules(ctx context.Context) {
	hub := fanout.New(s.rdb, fanout.Classic, s.log)
	defer hub.Close()
	changed, stop := hub.Signal(ctx, s.store.Layout().ControlChannel(), nil)
	defer stop()
	tick := time.NewTicker(s.registryEvery)
	defer tick.Stop()
	var warned string
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		reg, err := s.inspector.RegisteredSchedules(cctx)
		cancel()
		if err != nil && reg == nil {
			// Redis unreachable: keep the schedules as they are.
		} else {
			if err != nil && err.Error() != warned {
				warned = err.Error()
				s.log.Warn("registered schedules that do not decode are not fired", "error", err)
			}
			s.setFired(s.withRegistered(reg))
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
			_ = s.checkLayout(ctx)
			// Staging follows the namespace's encoding, which another
			// scheduler's registration may have changed (StagingAllowed).
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			if err := s.store.RefreshEncoding(cctx); err != nil && ctx.Err() == nil {
				s.log.Warn("could not read the namespace's task encoding; staging keeps its last setting", "error", err)
			}
			cancel()
			select {
			case s.registryPoke <- struct{}{}:
			default:
			}
		case <-s.relayout:
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			if err := s.registerPolicies(cctx); err != nil && ctx.Err() == nil {
				s.log.Warn("could not register the queues in the new shards; the registry check retries", "error", err)
			}
			cancel()
			continue
		case <-tick.C:
		}
	}
}

// withRegistered returns the configured schedules and those of reg whose
// names the configuration does not use.
func (s *Scheduler) withRegistered(reg []*periodic.Compiled) []*periodic.Compiled {
	return append(slices.Clone(s.schedules), periodic.Unshadowed(s.schedules, reg)...)
}

// setFired gives the firer ss, and keeps ss for firedSchedules.
func (s *Scheduler) setFired(ss []*periodic.Compiled) {
	s.fired.Store(&ss)
	s.firer.SetSchedules(ss)
}

// firedSchedules returns the schedules the firer fires now (the list is
// replaced, never changed in place: callers must not change it).
func (s *Scheduler) firedSchedules() []*periodic.Compiled { return *s.fired.Load() }

// registryCheck is how often a replica checks that Redis still holds the
// registration marker (one EXISTS) and re-reads the registered schedules
// (watchSchedules) besides the control channel's events; tests shorten
// Scheduler.registryEvery. A Redis that restarted without its data is
// noticed at once, by the control subscription's new confirmation; one
// flushed while connected within registryCheck. It was 5 s: two idle
// replicas spent 0.8 Redis commands/s on these two reads.
const registryCheck = time.Minute

// watchRegistry registers the queues again whenever the marker written
// by registerQueues is gone: Redis restarted without its data, or was
// flushed, and producers would get "unknown queue" until a scheduler
// restarted. It checks every registryEvery and whenever watchSchedules
// pokes it (an event of the control subscription, such as the
// confirmation after a reconnect). Queues registered or changed at run
// time (hourglass queue set) are lost with the data; the configured ones
// come back. It returns when ctx ends.
func (s *Scheduler) watchRegistry(ctx context.Context) {
	tick := time.NewTicker(s.registryEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-s.registryPoke:
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		n, err := s.rdb.Exists(cctx, s.store.Layout().Registered()).Result()
		cancel()
		if err != nil || n == 1 {
			continue // Redis unreachable: /readyz says so; checked again later
		}
		s.log.Warn("Redis lost the queue registry (restarted without its data, or flushed); registering the configured queues again")
		if err := s.registerQueues(ctx); err != nil {
			return // ctx ended
		}
	}
}

// registerQueues writes the registration marker, the configured queue
// policies and the far tier's settings to every shard, retrying while
// Redis is unreachable.
func (s *Scheduler) registerQueues(ctx context.Context) error {
	bo := backoff.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	for {
		// Each attempt within a second, so that /readyz says within about
		// a second why the replica is not ready.
		actx, cancel := context.WithTimeout(ctx, time.Second)
		// The marker first: data lost after it (a flush between the two
		// writes included) takes the marker with it, and watchRegistry
		// registers again.
		err := s.rdb.Set(actx, s.store.Layout().Registered(), s.replica, 0).Err()
		if err == nil {
			// The layout record says how many shards there are; the
			// configured count is only the initial one.
			_, err = s.layout.Check(actx)
		}
		if err == nil {
			err = s.registerPolicies(actx)
		}
		cancel()
		if err == nil {
			s.starting.Store(nil)
			s.registeredOnce.Do(func() { close(s.registered) })
			return nil
		}
		s.starting.Store(&startState{err: err})
		s.log.Warn("registering queues failed; retrying", "error", err)
		if bo.Wait(ctx); ctx.Err() != nil {
			return fmt.Errorf("register queues: %w", err)
		}
	}
}

// registerPolicies writes the configured queue policies and the far
// tier's settings to every shard of the current count.
func (s *Scheduler) registerPolicies(ctx context.Context) error {
	if err := s.store.RegisterQueues(ctx, s.cfg.QueuePolicies()); err != nil {
		return err
	}
	return s.store.SetFarTier(ctx, s.cfg.FarTier())
}
