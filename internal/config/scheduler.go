package config

import (
	"time"

	"github.com/hourglass-sched/hourglass/internal/election"
	"github.com/hourglass-sched/hourglass/internal/fire"
	"github.com/hourglass-sched/hourglass/internal/recovery"
	"github.com/hourglass-sched/hourglass/internal/reshard"
	"github.com/hourglass-sched/hourglass/internal/scan"
	"github.com/hourglass-sched/hourglass/internal/shard"
)

// SchedulerConfig configures the scheduler process.
type SchedulerConfig struct {
	// ReplicaID names this replica in etcd and in logs. Empty means the
	// binary picks hostname-pid at start (other characters become "-", a
	// long hostname loses its start).
	ReplicaID string `koanf:"replica_id"`
	// LeaseTTL is the TTL of the etcd lease that holds this replica's
	// shards.
	LeaseTTL time.Duration `koanf:"lease_ttl"`
	// ScanLimit is the largest batch of due tasks moved per script call.
	ScanLimit int `koanf:"scan_limit"`
	// SafetyRecheck is how often every owned shard is scanned even
	// without a wake-up while its wake-up subscription is not confirmed.
	SafetyRecheck time.Duration `koanf:"safety_recheck"`
	// RecoveryLimit is the largest batch of expired leases recovered per
	// script call.
	RecoveryLimit int `koanf:"recovery_limit"`
	// StrandCheck is how often a shard's owner looks for tasks that a
	// worker popped from a ready list but died before leasing.
	StrandCheck time.Duration `koanf:"strand_check"`
	// IdleRecheck is how often an owned shard is scanned without a
	// wake-up while its wake-up subscription is confirmed, and how often
	// the recovery loop of a shard with nothing leased and nothing ready
	// checks it anyway (the mover wakes it when tasks become ready); a
	// value below SafetyRecheck is raised to it.
	IdleRecheck time.Duration `koanf:"idle_recheck"`
	// FarBucket is the width of the far tier's time buckets: a task due
	// more than FarLead plus up to one bucket ahead is kept in a list per
	// bucket, at a fraction of a sorted-set member's memory, and moved
	// into the delayed set FarLead before its bucket starts.
	FarBucket time.Duration `koanf:"far_bucket"`
	// FarLead is how long before its bucket starts a far-tier bucket is
	// promoted into the delayed set.
	FarLead time.Duration `koanf:"far_lead"`
	// Prefetch moves tasks into ready lists up to this long before they
	// are due; workers hold each until its due time. Fewer, larger mover
	// calls and fetches cut Redis's cost per task at steady rates. See
	// docs/operations.md for what it changes (cancel, rate limits).
	Prefetch time.Duration `koanf:"prefetch"`
	// ReshardRate bounds the tasks this replica moves per second while the
	// shard count changes (docs/resharding.md).
	ReshardRate int `koanf:"reshard_rate"`
	// MisfireGrace is how late a periodic schedule's occurrence may be and
	// still be fired (late, once) whatever its catch-up policy: an owner
	// that died is replaced within lease_ttl and a second, so the grace
	// must exceed that; occurrences missed longer ago are the policy's.
	// At least 2s; 0 means the default. Default 1m.
	MisfireGrace time.Duration `koanf:"misfire_grace"`
	// ReshardReadyAfter: while the shard count changes, ready tasks that
	// waited this long (or of a paused queue) move to their new shard
	// (docs/resharding.md); 0 never.
	ReshardReadyAfter time.Duration `koanf:"reshard_ready_after"`
	// TaskEncoding is the encoding enqueues write (shard.TaskEncoding):
	// "auto" keeps the namespace's (version 2 for a namespace first
	// registered by this version, else version 1), "2" turns version 2
	// on once every process of the namespace reads it, "1" turns it off.
	TaskEncoding string `koanf:"task_encoding"`
}

// The scheduler's defaults and limits are the libraries': election (the
// lease), scan (the mover), recovery and shard (the far tier, prefetch).
func defaultScheduler() SchedulerConfig {
	return SchedulerConfig{
		LeaseTTL:          election.DefaultTTL,
		ScanLimit:         scan.DefaultLimit,
		SafetyRecheck:     scan.DefaultSafetyRecheck,
		Prefetch:          scan.DefaultPrefetch,
		RecoveryLimit:     recovery.DefaultLimit,
		StrandCheck:       recovery.DefaultStrandCheck,
		IdleRecheck:       recovery.DefaultIdleRecheck,
		FarBucket:         shard.DefaultFarBucket,
		FarLead:           shard.DefaultFarLead,
		ReshardRate:       reshard.DefaultRate,
		MisfireGrace:      fire.DefaultMisfireGrace,
		ReshardReadyAfter: reshard.DefaultReadyAfter,
		TaskEncoding:      shard.EncodingAuto.String(),
	}
}

// scheduler checks the far tier, whose keys depend on each other; the
// libraries check the other scheduler keys (Settings).
func (v *validator) scheduler(s SchedulerConfig) {
	if s.FarBucket != 0 && s.FarBucket < shard.MinFarBucket {
		v.add("scheduler.far_bucket", "must be at least %s (got %s)", shard.MinFarBucket, s.FarBucket)
	}
	minFarLead := time.Duration(0) // far_bucket 0: the far tier is off, far_lead unused
	if s.FarBucket != 0 {
		minFarLead = shard.MinFarLead
	}
	if s.FarLead < minFarLead {
		v.add("scheduler.far_lead", "must be at least %s (got %s)", minFarLead, s.FarLead)
	}
}

// Encoding returns the task encoding the scheduler registers
// (scheduler.task_encoding, checked by Settings' Allowed).
func (c *Config) Encoding() shard.TaskEncoding {
	e, _ := shard.ParseTaskEncoding(c.Scheduler.TaskEncoding)
	return e
}

// ForMover returns the mover's settings (Logger and Metrics are the
// caller's to set).
func (c *Config) ForMover() scan.Config {
	s := c.Scheduler
	return scan.Config{Limit: s.ScanLimit, SafetyRecheck: s.SafetyRecheck, IdleRecheck: s.IdleRecheck, Prefetch: s.Prefetch}
}

// ForFire returns the periodic firing loop's settings (Schedules, Logger
// and Metrics are the caller's to set).
func (c *Config) ForFire() fire.Config {
	return fire.Config{MisfireGrace: c.Scheduler.MisfireGrace}
}

// ForReshard returns the reshard loop's settings (Logger, Metrics and
// HandOff are the caller's to set).
func (c *Config) ForReshard() reshard.Config {
	r := reshard.DefaultConfig() // batch, margin and retry are not configured
	r.Rate = c.Scheduler.ReshardRate
	r.ReadyAfter = c.Scheduler.ReshardReadyAfter
	return r
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
	ns, n := shard.LayoutDefaults(c.Namespace, c.Shards)
	return election.Config{Prefix: election.Prefix(ns), ReplicaID: replica, Shards: n, TTL: c.Scheduler.LeaseTTL}
}

// FarTier returns the far tier's settings that the schedulers record in
// Redis.
func (c *Config) FarTier() shard.FarTier {
	return shard.FarTier{Bucket: c.Scheduler.FarBucket, Lead: c.Scheduler.FarLead}
}
