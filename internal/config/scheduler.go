package config

import (
	"time"

	"github.com/hourglass-sched/hourglass/internal/election"
	"github.com/hourglass-sched/hourglass/internal/recovery"
	"github.com/hourglass-sched/hourglass/internal/reshard"
	"github.com/hourglass-sched/hourglass/internal/scan"
	"github.com/hourglass-sched/hourglass/internal/shard"
)

// SchedulerConfig configures the scheduler process.
type SchedulerConfig struct {
	// ReplicaID names this replica in etcd and in logs. Empty means the
	// binary picks hostname-pid at start (other characters become "-", a
	// long hostname loses its start). If set it must match
	// ^[A-Za-z0-9_.-]{1,64}$.
	ReplicaID string `koanf:"replica_id"`
	// LeaseTTL is the TTL of the etcd lease that holds this replica's
	// shards: a whole number of seconds from 2s (etcd's minimum) to 60s.
	// Default 5s.
	LeaseTTL time.Duration `koanf:"lease_ttl"`
	// ScanLimit is the largest batch of due tasks moved per script call,
	// 1 to 10000. Default 512.
	ScanLimit int `koanf:"scan_limit"`
	// SafetyRecheck is how often every owned shard is scanned even
	// without a wake-up, at least 100ms. Default 30s.
	SafetyRecheck time.Duration `koanf:"safety_recheck"`
	// RecoveryLimit is the largest batch of expired leases recovered per
	// script call, 1 to 10000. Default 512.
	RecoveryLimit int `koanf:"recovery_limit"`
	// StrandCheck is how often a shard's owner looks for tasks that a
	// worker popped from a ready list but died before leasing, at least
	// 100ms. Default 5s.
	StrandCheck time.Duration `koanf:"strand_check"`
	// IdleRecheck is how often the recovery loop of a shard with nothing
	// leased and nothing ready checks it anyway (the mover wakes it when
	// tasks become ready), at least 100ms; a value below SafetyRecheck
	// is raised to it. Default 5m.
	IdleRecheck time.Duration `koanf:"idle_recheck"`
	// FarBucket is the width of the far tier's time buckets: a task due
	// more than FarLead plus up to one bucket ahead is kept in a list per
	// bucket, at a fraction of a sorted-set member's memory, and moved
	// into the delayed set FarLead before its bucket starts. 0 turns the
	// tier off; else at least 1s. Default 1m.
	FarBucket time.Duration `koanf:"far_bucket"`
	// FarLead is how long before its bucket starts a far-tier bucket is
	// promoted into the delayed set, at least 1s. Default 15s.
	FarLead time.Duration `koanf:"far_lead"`
	// Prefetch moves tasks into ready lists up to this long before they
	// are due, whole milliseconds from 0 to 250ms; workers hold each until
	// its due time. Fewer, larger mover calls and fetches cut Redis's cost
	// per task at steady rates. 0 (the default) moves tasks when due. See
	// docs/operations.md for what it changes (cancel, rate limits).
	Prefetch time.Duration `koanf:"prefetch"`
	// ReshardRate bounds the tasks this replica moves per second while the
	// shard count changes (docs/resharding.md), 0 for no bound, at most
	// 1000000. Default 5000: a change then costs the load little latency.
	ReshardRate int `koanf:"reshard_rate"`
}

// The scheduler's defaults and limits are the libraries': election (the
// lease), scan (the mover), recovery and shard (the far tier, prefetch).
func defaultScheduler() SchedulerConfig {
	return SchedulerConfig{
		LeaseTTL:      election.DefaultTTL,
		ScanLimit:     scan.DefaultLimit,
		SafetyRecheck: scan.DefaultSafetyRecheck,
		RecoveryLimit: recovery.DefaultLimit,
		StrandCheck:   recovery.DefaultStrandCheck,
		IdleRecheck:   recovery.DefaultIdleRecheck,
		FarBucket:     shard.DefaultFarBucket,
		FarLead:       shard.DefaultFarLead,
		ReshardRate:   reshard.DefaultRate,
	}
}

func (v *validator) scheduler(s SchedulerConfig) {
	if id := s.ReplicaID; id != "" && !election.ValidReplicaID(id) {
		v.add("scheduler.replica_id", "must be empty or match %s (got %q)", election.ReplicaIDRule, id)
	}
	v.durationRange("scheduler.lease_ttl", s.LeaseTTL, election.MinTTL, election.MaxTTL)
	if ttl := s.LeaseTTL; ttl%time.Second != 0 {
		// etcd lease TTLs are whole seconds; refuse rather than truncate.
		v.add("scheduler.lease_ttl", "must be a whole number of seconds (got %s)", ttl)
	}
	v.intRange("scheduler.scan_limit", int64(s.ScanLimit), 1, scan.MaxLimit)
	v.durationRange("scheduler.safety_recheck", s.SafetyRecheck, max(scan.MinSafetyRecheck, recovery.MinInterval), 0)
	v.intRange("scheduler.recovery_limit", int64(s.RecoveryLimit), 1, recovery.MaxLimit)
	v.durationRange("scheduler.strand_check", s.StrandCheck, recovery.MinInterval, 0)
	v.durationRange("scheduler.idle_recheck", s.IdleRecheck, recovery.MinInterval, 0)
	minFarLead := time.Duration(0) // far_bucket 0: the far tier is off, far_lead unused
	if s.FarBucket != 0 {
		v.durationRange("scheduler.far_bucket", s.FarBucket, shard.MinFarBucket, 0)
		minFarLead = shard.MinFarLead
	}
	v.durationRange("scheduler.far_lead", s.FarLead, minFarLead, 0)
	v.intRange("scheduler.reshard_rate", int64(s.ReshardRate), 0, reshard.MaxRate)
	v.durationRange("scheduler.prefetch", s.Prefetch, 0, shard.MaxPrefetch)
	if p := s.Prefetch; p%time.Millisecond != 0 {
		// Due times are whole milliseconds; refuse rather than truncate.
		v.add("scheduler.prefetch", "must be a whole number of milliseconds (got %s)", p)
	}
}

// ForMover returns the mover's settings (Logger and Metrics are the
// caller's to set).
func (c *Config) ForMover() scan.Config {
	s := c.Scheduler
	return scan.Config{Limit: s.ScanLimit, SafetyRecheck: s.SafetyRecheck, Prefetch: s.Prefetch}
}

// ForReshard returns the migration's settings (Logger, Metrics and
// HandOff are the caller's to set).
func (c *Config) ForReshard() reshard.Config {
	return reshard.Config{Rate: c.Scheduler.ReshardRate}
}

// ForRecovery returns the recovery loop's settings, the dead-letter
// retention included (Logger and Metrics are the caller's to set).
func (c *Config) ForRecovery() recovery.Config {
	s := c.Scheduler
	return recovery.Config{
		Limit: s.RecoveryLimit, StrandCheck: s.StrandCheck, SafetyRecheck: s.SafetyRecheck, IdleRecheck: s.IdleRecheck,
		DeadMaxSize: c.DLQ.MaxSize, DeadMaxAge: c.DLQ.MaxAge,
	}
}

// ForElection returns the election's settings for the replica named
// replica: its etcd keys live under "/<namespace>/" (Logger and
// Registerer are the caller's to set).
func (c *Config) ForElection(replica string) election.Config {
	return election.Config{Prefix: "/" + c.Namespace + "/", ReplicaID: replica, Shards: c.Shards, TTL: c.Scheduler.LeaseTTL}
}

// FarTier returns the far tier's settings that the schedulers record in
// Redis.
func (c *Config) FarTier() shard.FarTier {
	return shard.FarTier{Bucket: c.Scheduler.FarBucket, Lead: c.Scheduler.FarLead}
}
