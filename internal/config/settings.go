package config

import (
	"time"

	"github.com/hourglass-sched/hourglass/internal/election"
	"github.com/hourglass-sched/hourglass/internal/fire"
	"github.com/hourglass-sched/hourglass/internal/recovery"
	"github.com/hourglass-sched/hourglass/internal/reshard"
	"github.com/hourglass-sched/hourglass/internal/scan"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/periodic"
	"github.com/hourglass-sched/hourglass/worker"
)

// Setting is one configuration key, stated once: its range, its unit,
// what its zero value means and what it does. Its default is [Default]'s
// value at Key (the owning library's constant, taken by defaults.go's
// sections). [Config.Validate] enforces it: Lib names the library fields
// whose Validate is the rule (config only adds the key name); a setting
// without Lib has its range checked from Min, Max, Unit and Allowed
// here, and its other rules in the section's file. The example
// configurations and the settings tables of docs/operations.md are
// checked against these rows by settings_test.go, which also renders the
// tables (go test ./internal/config -run TestSettingsDocs -update).
type Setting struct {
	// Key is the dotted key; <q> stands for a queue's name and <name> for
	// a periodic schedule's.
	Key string
	// Min and Max bound the value (nil: no bound), in the field's type
	// (int, int64, float64 or time.Duration). A zero outside them is
	// still valid when Zero says what it means.
	Min, Max any
	// Unit is what a duration must be a whole number of (time.Second,
	// time.Millisecond); 0: any.
	Unit time.Duration
	// Allowed lists the values a string may take; nil: any.
	Allowed []string
	// Rule states any other rule, for the docs: a pattern, "host:port".
	Rule string
	// Zero says what the zero value (0, "", an empty list) means when it
	// is not just a number in the range: ZeroDefault, or a phrase such as
	// "unbounded" or "off".
	Zero string
	// Default states the default where Default() holds none, as for a
	// periodic schedule's keys (the periodic package applies it).
	Default string
	// Lib names the library fields whose Validate holds the rule, as
	// "scan.Limit" or "worker.QueueOptions.Concurrency"; their problems
	// are reported under Key.
	Lib []string
	// Custom: the range is checked by hand in the section's file (it
	// depends on another key), not from Min and Max.
	Custom bool
	// Doc is one line on what the key does.
	Doc string
}

// ZeroDefault is Setting.Zero of a key whose 0 (or "") means its
// default: the key cannot be off. [Load] replaces such a zero with the
// default, so the Config a binary gets holds the values it runs with.
const ZeroDefault = "the default"

// Settings returns every configuration key, in the order of the example
// configuration: the one table the validator, the examples and the docs
// follow.
func Settings() []Setting { return settings }

var settings = concat(
	[]Setting{
		{Key: "namespace", Rule: "`" + shard.NamespaceRule + "`", Zero: ZeroDefault,
			Lib: []string{"worker.Config.Namespace", "election.Prefix"},
			Doc: "prefix of every Redis and etcd key; the same on every scheduler, worker and producer"},
		{Key: "shards", Min: 1, Max: shard.MaxShards, Zero: ZeroDefault,
			Lib: []string{"worker.Config.Shards", "election.Shards"},
			Doc: "shard count of a fresh deployment, the same on every process; once changed online the count in Redis wins (docs/resharding.md)"},
		{Key: "max_payload", Min: 1, Max: shard.MaxPayloadLimit,
			Doc: "largest task payload accepted, in bytes"},
		{Key: "layout_refresh", Min: shard.MinLayoutRefresh, Zero: ZeroDefault,
			Lib: []string{"worker.Config.LayoutRefresh"},
			Doc: "how often a process re-reads the layout record besides announcements on the control channel"},

		{Key: "redis.mode", Allowed: []string{RedisStandalone, RedisSentinel, RedisCluster},
			Doc: "Redis topology (docs/topologies.md)"},
		{Key: "redis.addr", Rule: "host:port", Zero: "none (modes sentinel and cluster)",
			Doc: "the standalone server (mode standalone)"},
		{Key: "redis.addrs", Rule: "host:port each", Zero: "none (mode standalone)",
			Doc: "the Sentinels (mode sentinel) or some cluster nodes, the rest discovered (mode cluster)"},
		{Key: "redis.master_name", Zero: "none (modes standalone and cluster)",
			Doc: "name the Sentinels monitor the primary under (mode sentinel)"},
		{Key: "redis.sentinel_username", Zero: "none",
			Doc: "user of the Sentinels themselves, when they require AUTH (mode sentinel)"},
		{Key: "redis.sentinel_password", Zero: "none",
			Doc: "password of the Sentinels (mode sentinel); secret"},
		{Key: "redis.username", Zero: "the default user",
			Doc: "ACL user of the data nodes"},
		{Key: "redis.password", Zero: "none",
			Doc: "ACL or AUTH password; secret"},
		{Key: "redis.db", Min: 0, Max: maxRedisDB, Rule: "0 in mode cluster",
			Doc: "logical database"},
	},
	tlsSettings("redis", "every Redis server (the data nodes and, in mode sentinel, the Sentinels)"),
	[]Setting{
		{Key: "redis.pool_size", Min: 0, Zero: "the go-redis default (10 per CPU)",
			Doc: "most connections (per node on a cluster)"},
		{Key: "redis.dial_timeout", Min: time.Duration(1),
			Doc: "bound on establishing a connection"},

		{Key: "etcd.endpoints", Rule: "http:// or https:// URLs, at least one",
			Doc: "client URLs of the etcd members"},
		{Key: "etcd.username", Zero: "no authentication",
			Doc: "etcd user"},
		{Key: "etcd.password", Zero: "none",
			Doc: "etcd user's password; secret"},
	},
	tlsSettings("etcd", "the etcd members"),
	[]Setting{
		{Key: "etcd.dial_timeout", Min: time.Duration(1),
			Doc: "bound on start-up calls such as fetching an auth token"},

		{Key: "scheduler.replica_id", Rule: "`" + election.ReplicaIDRule + "`", Zero: "hostname-pid",
			Lib: []string{"election.ReplicaID"},
			Doc: "this replica's name in etcd and in logs"},
		{Key: "scheduler.lease_ttl", Min: election.MinTTL, Max: election.MaxTTL, Unit: time.Second, Zero: ZeroDefault,
			Lib: []string{"election.TTL"},
			Doc: "TTL of the etcd lease holding the replica's shards: a crashed replica's shards are taken over after about this long"},
		{Key: "scheduler.scan_limit", Min: 1, Max: scan.MaxLimit, Zero: ZeroDefault,
			Lib: []string{"scan.Limit"},
			Doc: "most due tasks one mover call moves"},
		{Key: "scheduler.safety_recheck", Min: max(scan.MinSafetyRecheck, recovery.MinInterval), Zero: ZeroDefault,
			Lib: []string{"scan.SafetyRecheck", "recovery.SafetyRecheck"},
			Doc: "longest an owned shard goes unscanned without a wake-up while its wake-up subscription is not confirmed (and longest an active shard's recovery loop sleeps)"},
		{Key: "scheduler.recovery_limit", Min: 1, Max: recovery.MaxLimit, Zero: ZeroDefault,
			Lib: []string{"recovery.Limit"},
			Doc: "most expired leases, stranded ids or dead letters one recovery call handles"},
		{Key: "scheduler.strand_check", Min: recovery.MinInterval, Zero: ZeroDefault,
			Lib: []string{"recovery.StrandCheck"},
			Doc: "spacing of the checks for tasks a worker popped and never leased (and of lease checks on an active shard)"},
		{Key: "scheduler.idle_recheck", Min: recovery.MinInterval, Zero: ZeroDefault,
			Lib: []string{"recovery.IdleRecheck", "scan.IdleRecheck"},
			Doc: "longest an owned shard goes unscanned while its wake-up subscription is confirmed (the bound for a task written by hand without a wake-up), and longest the recovery loop of an idle shard sleeps (the mover wakes it); raised to safety_recheck if below it"},
		{Key: "scheduler.far_bucket", Min: shard.MinFarBucket, Zero: "no far tier", Custom: true,
			Doc: "width of the far tier's buckets: tasks due beyond far_lead plus a bucket wait in a list per bucket, at a fraction of the memory"},
		{Key: "scheduler.far_lead", Min: shard.MinFarLead, Rule: "unused when far_bucket is 0", Custom: true,
			Doc: "how long before its start a far-tier bucket is moved into the delayed set"},
		{Key: "scheduler.prefetch", Min: time.Duration(0), Max: shard.MaxPrefetch, Unit: time.Millisecond, Zero: "tasks move when due",
			Lib: []string{"scan.Prefetch"},
			Doc: "move tasks into ready lists this long before they are due (a dense batch up to 1s: staged); workers hold each until then (see Prefetch below)"},
		{Key: "scheduler.reshard_rate", Min: 0, Max: reshard.MaxRate, Zero: "no bound",
			Lib: []string{"reshard.Rate"},
			Doc: "most tasks this replica moves per second while the shard count changes (docs/resharding.md)"},
		{Key: "scheduler.misfire_grace", Min: fire.MinMisfireGrace, Zero: ZeroDefault,
			Lib: []string{"fire.MisfireGrace"},
			Doc: "how late a periodic occurrence may be and still be fired, once, whatever its catch-up policy (an owner's death takes lease_ttl and a second); older ones are the policy's"},
		{Key: "scheduler.reshard_ready_after", Min: time.Duration(0), Zero: "ready tasks wait for workers",
			Lib: []string{"reshard.ReadyAfter"},
			Doc: "while the shard count changes, a ready task that waited this long for a worker (at once if its queue is paused) moves to its new shard, ready there, so that a queue nobody consumes cannot keep the change open (docs/resharding.md)"},
		{Key: "scheduler.task_encoding", Allowed: []string{"auto", "1", "2"}, Zero: ZeroDefault,
			Doc: "encoding of stored tasks: 2 (a 24-byte binary header naming the queue by number, 32 bytes a task less) or 1 (text with the queue's name); auto keeps the namespace's, 2 for one created by this version; set 2 on an older namespace once every process reading it runs this version (docs/operations.md)"},

		{Key: "worker.shutdown_grace", Min: time.Duration(0), Zero: "running tasks are released at once",
			Lib: []string{"worker.Config.ShutdownGrace"},
			Doc: "after SIGTERM, how long running handlers may finish before their tasks are released"},
		{Key: "worker.fetch_timeout", Min: worker.MinFetchTimeout, Max: worker.MaxFetchTimeout, Unit: time.Second, Zero: ZeroDefault,
			Lib: []string{"worker.Config.FetchTimeout"},
			Doc: "longest blocking fetch; an idle worker sends Redis one command per fetch_timeout (shutdown and a change of the shard count end a fetch in flight at once)"},
		{Key: "worker.ack_linger", Min: time.Duration(0), Max: worker.MaxAckLinger, Zero: "each ack is sent at once",
			Lib: []string{"worker.Config.AckLinger"},
			Doc: "how long a successful task's ack may wait for others to share its round trip to Redis; the handler's slot is free meanwhile"},
		{Key: "worker.registration_wait", Min: time.Duration(0), Zero: ZeroDefault,
			Lib: []string{"worker.Config.RegistrationWait"},
			Doc: "how long the worker waits at start for a scheduler to register each of its queues in its namespace; then it exits 1 naming the namespace and the queues missing"},
		{Key: "worker.version", Lib: []string{"worker.Config.Version"}, Rule: "1..64 of A-Za-z0-9._:+-", Zero: "the binary's version",
			Doc: "the version the worker says it runs: a queue's routing may admit only some versions (hourglass queue route; docs/operations.md)"},
		{Key: "worker.tags", Lib: []string{"worker.Config.Tags"}, Rule: "each 1..64 of A-Za-z0-9._:+-", Zero: "none",
			Doc: "the worker's tags, canary for a canary: a queue's routing may exclude or require them (hourglass queue route)"},
		{Key: "worker.tracing.exporter", Allowed: []string{"otlp", "file"}, Zero: "off",
			Doc: "where the worker's OpenTelemetry spans go: an OTLP/HTTP collector, or a file (docs/tracing.md)"},
		{Key: "worker.tracing.endpoint", Rule: "an http or https URL", Zero: "OTEL_EXPORTER_OTLP_ENDPOINT, else http://localhost:4318",
			Doc: "the OTLP/HTTP collector's URL (exporter otlp)"},
		{Key: "worker.tracing.file", Rule: "with exporter file", Zero: "none",
			Doc: "file the spans are appended to as JSON lines (exporter file)"},

		{Key: "dlq.max_size", Min: 0, Zero: "unbounded",
			Lib: []string{"recovery.DeadMaxSize"},
			Doc: "most dead letters kept per shard, the oldest deleted first"},
		{Key: "dlq.max_age", Min: time.Duration(0), Zero: "unbounded",
			Lib: []string{"recovery.DeadMaxAge"},
			Doc: "longest a dead letter is kept"},

		{Key: "queues.<q>.max_retries", Min: 0, Max: shard.MaxRetriesLimit,
			Doc: "retries of a failed task before it is dead-lettered (a task may set its own at enqueue); registered by the schedulers"},
		{Key: "queues.<q>.timeout", Min: shard.MinTimeout,
			Doc: "lease (visibility timeout) of one attempt, and the timeout of a task enqueued without one; registered by the schedulers"},
		{Key: "queues.<q>.backoff.base", Min: shard.MinBackoffBase,
			Doc: "delay before the first retry; retry n waits about min(cap, base·factor^(n−1)), half of it random"},
		{Key: "queues.<q>.backoff.cap", Rule: "at least backoff.base",
			Doc: "longest delay before a retry"},
		{Key: "queues.<q>.backoff.factor", Min: 1.0, Max: float64(shard.MaxBackoffFactor),
			Doc: "growth of the delay per attempt; 1 retries at a fixed interval"},
		{Key: "queues.<q>.retention", Min: time.Duration(0), Max: shard.MaxRetentionAge, Zero: "no records kept",
			Doc: "how long the record of a task that ended (succeeded, with the handler's result; cancelled) is kept for Lookup, client.Result and client.Wait, at least 1s when set; registered by the schedulers"},
		{Key: "queues.<q>.retention_count", Min: 1, Max: shard.MaxRetentionCount,
			Doc: "most records of ended tasks kept per shard, the oldest deleted first"},
		{Key: "queues.<q>.fair",
			Doc: "take the queue's due tasks in turns between their keys (a task id's hash tag, client.Task.Key) instead of in due order (docs/fairness.md); registered by the schedulers"},
		{Key: "queues.<q>.fair_window", Min: 1, Max: shard.MaxFairWindow,
			Doc: "most tasks of a fair queue in its ready list per shard, taken in turns; a quiet key's task waits behind at most this many per shard"},
		{Key: "queues.<q>.key_concurrency", Min: 0, Max: shard.MaxKeyConcurrency, Zero: "no cap per key",
			Doc: "most tasks of each key of a fair queue holding a permit at once across every worker (taken when a task enters the window, before any worker claims it; needs placement by key, docs/fairness.md); `hourglass queue keycap` sets a key's own; registered by the schedulers"},
		{Key: "queues.<q>.concurrency", Min: 1, Max: worker.MaxConcurrency, Zero: ZeroDefault,
			Lib: []string{"worker.QueueOptions.Concurrency"},
			Doc: "handlers of the queue running at once in one worker process"},
		{Key: "queues.<q>.handler_timeout", Min: time.Duration(0), Zero: "no bound",
			Lib: []string{"worker.QueueOptions.HandlerTimeout"},
			Doc: "bound on one handler run in the worker binary; a run that exceeds it fails and is retried"},
		{Key: "queues.<q>.lease_after", Min: time.Duration(0), Max: worker.MaxLeaseAfter, Zero: "every task is leased before its handler starts",
			Lib: []string{"worker.QueueOptions.LeaseAfter"},
			Doc: "a popped task's handler starts at once and is leased only if it still runs after this long (docs/protocol.md)"},
		{Key: "queues.<q>.max_concurrency", Min: 0, Max: worker.MaxClusterConcurrency, Zero: "no cluster-wide cap",
			Lib: []string{"worker.QueueOptions.MaxConcurrency"},
			Doc: "handlers of the queue running at once across every worker process"},
		{Key: "queues.<q>.rate_limit.rate", Min: 0, Max: worker.MaxRate, Zero: "no rate limit",
			Lib: []string{"worker.QueueOptions.Rate"},
			Doc: "dispatches of the queue per period across every worker process, by rate_limit.kind"},
		{Key: "queues.<q>.rate_limit.period", Min: worker.MinRatePeriod, Zero: ZeroDefault,
			Lib: []string{"worker.QueueOptions.RatePeriod"},
			Doc: "period of rate_limit.rate"},
		{Key: "queues.<q>.rate_limit.burst", Min: 1, Max: worker.MaxBurst, Zero: ZeroDefault,
			Lib: []string{"worker.QueueOptions.Burst"},
			Doc: "most dispatches admitted at once (token_bucket), or admitted ahead of their turn (leaky_bucket); 0 or 1 with a window"},
		{Key: "queues.<q>.rate_limit.kind", Allowed: shard.LimiterKinds, Zero: ZeroDefault,
			Lib: []string{"worker.QueueOptions.Limiter"},
			Doc: "the limiter that holds rate_limit.rate (docs/coordination.md, \"Flow control of a queue\")"},
		{Key: "queues.<q>.key_rate_limit.rate", Min: 0, Max: shard.MaxKeyRatePerSecond, Zero: "no rate per key",
			Doc: "tasks of each key of a fair queue entering its window per period, by key_rate_limit.kind per key, taken before any worker claims the task (docs/fairness.md); `hourglass queue keyrate` sets a key's own; registered by the schedulers"},
		{Key: "queues.<q>.key_rate_limit.period", Min: time.Millisecond, Unit: time.Millisecond,
			Doc: "period of key_rate_limit.rate"},
		{Key: "queues.<q>.key_rate_limit.burst", Min: 1, Max: shard.MaxKeyRateBurst,
			Doc: "most tasks of a key entering the window at once after a quiet time (token_bucket); 1 with the other kinds"},
		{Key: "queues.<q>.key_rate_limit.kind", Allowed: shard.LimiterKinds, Zero: ZeroDefault,
			Doc: "the limiter per key: token_bucket, leaky_bucket (evenly spaced), fixed_window or sliding_window (docs/fairness.md, \"Rates per key\")"},
		{Key: "queues.<q>.http.url", Rule: "http:// or https:// URL; not with command", Zero: "no HTTP target",
			Doc: "the worker binary sends each task to this URL; a password in it is secret"},
		{Key: "queues.<q>.http.headers", Rule: "only with http.url", Zero: "none",
			Doc: "headers added to every request; their values are secret"},
		{Key: "queues.<q>.http.method", Allowed: []string{"POST", "PUT"},
			Doc: "method of the requests"},
		{Key: "queues.<q>.command", Rule: "argv, not with http.url", Zero: "no command target",
			Doc: "the worker binary runs this program (no shell) for each task"},

		{Key: "periodic.<name>.queue", Lib: periodicRule, Rule: "one of queues",
			Doc: "queue of the schedule's tasks"},
		{Key: "periodic.<name>.payload", Lib: periodicRule, Zero: "none",
			Doc: "payload of every task, as text"},
		{Key: "periodic.<name>.cron", Lib: periodicRule, Rule: "five fields, six with seconds first, or a descriptor such as @hourly", Zero: "interval instead",
			Doc: "when the schedule occurs: a cron expression; exactly one of cron and interval"},
		{Key: "periodic.<name>.interval", Lib: periodicRule, Min: periodic.MinInterval, Unit: time.Millisecond, Zero: "cron instead",
			Doc: "when the schedule occurs: a fixed period, counted from the Unix epoch"},
		{Key: "periodic.<name>.time_zone", Lib: periodicRule, Rule: "an IANA name; cron only", Zero: ZeroDefault, Default: "UTC",
			Doc: "time zone of cron"},
		{Key: "periodic.<name>.jitter", Lib: periodicRule, Min: time.Duration(0), Rule: "shorter than the period", Zero: "none",
			Doc: "delays each task by up to this much, the same on every replica"},
		{Key: "periodic.<name>.max_retries", Lib: periodicRule, Min: 0, Max: shard.MaxRetriesLimit, Zero: "", Default: "the queue's",
			Doc: "retries of the schedule's tasks"},
		{Key: "periodic.<name>.timeout", Lib: periodicRule, Min: time.Duration(0), Unit: time.Millisecond, Zero: ZeroDefault, Default: "the queue's",
			Doc: "timeout of the schedule's tasks"},
		{Key: "periodic.<name>.catch_up", Lib: periodicRule, Allowed: []string{string(periodic.CatchUpSkip), string(periodic.CatchUpLatest), string(periodic.CatchUpAll)},
			Zero: ZeroDefault, Default: string(periodic.CatchUpSkip),
			Doc: "what to fire of the occurrences missed while no scheduler ran (docs/periodic.md)"},
		{Key: "periodic.<name>.catch_up_window", Lib: periodicRule, Min: time.Duration(0), Max: periodic.MaxCatchUpWindow, Zero: ZeroDefault, Default: "1h",
			Doc: "how far back catch_up all looks"},
		{Key: "periodic.<name>.overlap", Lib: periodicRule, Allowed: []string{string(periodic.OverlapAllow), string(periodic.OverlapSkip)},
			Zero: ZeroDefault, Default: string(periodic.OverlapAllow),
			Doc: "skip an occurrence while the previous one's task is still stored, or allow it"},

		{Key: "http.addr", Rule: "host:port", Zero: "no HTTP endpoint",
			Doc: "listener of /metrics, the health endpoints and the dashboard; the worker binary's default is 127.0.0.1:9465"},
		{Key: "http.dashboard.enabled",
			Doc: "serve the web dashboard at /ui/ (scheduler; docs/dashboard.md)"},
		{Key: "http.dashboard.read_only",
			Doc: "refuse every change (pause, resume, replay, purge, cancel) and hide its buttons"},
		{Key: "http.dashboard.username", Rule: "with password", Zero: "no basic auth",
			Doc: "user of the dashboard's HTTP basic auth"},
		{Key: "http.dashboard.password", Rule: "with username", Zero: "no basic auth",
			Doc: "password of the dashboard's HTTP basic auth; secret"},
		{Key: "http.dashboard.allowed_hosts", Rule: "host names without port", Zero: "none",
			Doc: "names the dashboard answers under besides IP addresses and localhost (DNS rebinding)"},

		{Key: "log.level", Allowed: logLevels,
			Doc: "least level logged"},
		{Key: "log.format", Allowed: logFormats,
			Doc: "format of every log line, the Redis client's included"},
	},
)

// periodicRule is Setting.Lib of a periodic schedule's keys:
// periodic.Schedule.Compile is their rule, and names the key of each
// problem.
var periodicRule = []string{"periodic.Schedule"}

// tlsSettings are the TLS keys under prefix (redis or etcd).
func tlsSettings(prefix, to string) []Setting {
	p := prefix + ".tls."
	return []Setting{
		{Key: p + "enabled", Doc: "TLS to " + to + "; the other tls keys need it"},
		{Key: p + "ca_file", Zero: "the system's roots", Doc: "PEM certificate authorities that verify the server"},
		{Key: p + "cert_file", Rule: "with key_file", Zero: "no client certificate", Doc: "PEM client certificate"},
		{Key: p + "key_file", Rule: "with cert_file", Zero: "no client certificate", Doc: "PEM private key of cert_file"},
		{Key: p + "server_name", Zero: "the address's host", Doc: "host name verified in the server's certificate"},
		{Key: p + "insecure_skip_verify", Doc: "skip verifying the server's certificate; tests only"},
	}
}

func concat(parts ...[]Setting) []Setting {
	var out []Setting
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
