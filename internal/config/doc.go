// Package config loads and validates the configuration shared by the
// Hourglass binaries (cmd/scheduler, cmd/worker).
//
// # Sources and precedence
//
// [Load] builds a [Config] from four layers, each overriding the one
// before it:
//
//  1. built-in defaults ([Default]);
//  2. a YAML file named by -config (optional);
//  3. environment variables starting with HOURGLASS_;
//  4. -set key=value flags, applied in the order given.
//
// Every layer is checked on its own: a key that does not exist or a value
// of the wrong type is reported with its full dotted key and the source it
// came from. The merged result is then checked by [Config.Validate].
//
// # Keys
//
// Keys are dotted paths of the snake_case names in the YAML file, for
// example redis.addr, scheduler.lease_ttl or queues.emails.timeout.
// Durations are strings with a unit ("5s", "250ms"). A list (such as
// etcd.endpoints) can be given from the environment or -set as one
// comma-separated string.
//
// # Environment
//
// A variable HOURGLASS_<KEY> sets <key>, where a double underscore
// separates levels and the name is lower-cased:
//
//	HOURGLASS_REDIS__ADDR=10.0.0.5:6379        redis.addr
//	HOURGLASS_SCHEDULER__LEASE_TTL=10s         scheduler.lease_ttl
//	HOURGLASS_ETCD__ENDPOINTS=http://a:2379,http://b:2379
//	HOURGLASS_QUEUES__EMAILS__MAX_RETRIES=5    queues.emails.max_retries
//
// Every HOURGLASS_ variable must name a known key. Queue names set through
// the environment are lower-case and cannot contain '.', ':' or '-'; use
// the file or -set for such names. The same holds for header names
// (HOURGLASS_QUEUES__HOOKS__HTTP__HEADERS__AUTHORIZATION sets the
// Authorization header), and a command given as one string is split at
// commas.
//
// # Flags
//
//	-config path        YAML file to load
//	-set key=value      set one key; repeatable
//
// With -set, a queue name may contain dots: in queues.<name>.<field> the
// name is the shortest run of segments followed by a known queue field,
// so -set queues.mail.high.timeout=5s sets the timeout of queue
// "mail.high" and -set queues.hooks.http.headers.X-Api-Key=k sets a
// header of queue "hooks".
//
// # Queues
//
// When no layer mentions queues, the configuration has a single queue
// named "default". Otherwise the queues are exactly those named in any
// layer, each starting from [DefaultQueue] before its settings are applied.
// Header names in queues.<name>.http.headers are stored in canonical form
// (x-api-key becomes X-Api-Key), so a later layer overrides a header
// however it spells the name.
//
// # Settings: each stated once
//
// [Settings] (settings.go) is the one table of keys: for each, its range,
// unit, what its zero means and a line of doc. Its default is [Default]'s
// value, built in each section's file (scheduler.go, worker.go, queue.go,
// connection.go) from the libraries' own constants (scan.DefaultLimit,
// recovery.DefaultDeadMaxSize, worker.DefaultAckLinger, ...); the binaries'
// own settings (Redis and etcd connections, http, log) are stated in
// their section's file. The For* methods (ForMover, ForRecovery,
// ForReshard, ForElection, ForWorker, QueueConfig.ForWorker) and
// QueuePolicies and FarTier hand each library its settings, and each
// library's DefaultConfig is what Default hands it.
//
// [Config.Validate] runs each library's Validate on what the For*
// methods hand it and reports the library's problem under the key name;
// the ranges of the keys no library owns are checked from their rows.
// A 0 means the same in a key as in the library field it sets: the
// default where the setting cannot be off (Load then fills in the
// default), off where it can (worker.ack_linger 0 is no linger, as a
// zero worker.Config.AckLinger is). settings_test.go checks the
// Config's keys, the validator, the example configurations and the
// settings tables of docs/operations.md (which it renders) against the
// table.
//
// # Per-binary defaults
//
// Both binaries read the same keys. [WithDefaults] lets a binary change
// the built-in defaults below every source; the worker binary uses
// [WorkerDefaults] (http.addr 127.0.0.1:9465, next to the scheduler's
// 9464).
package config
