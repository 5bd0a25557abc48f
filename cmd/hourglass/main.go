// Command hourglass is Hourglass's admin CLI: queue depths, pause and
// resume, the queue registry, task listing, lookup and cancel, the
// dead-letter queue (list, show, replay, purge), shard owners, the layout
// and changing the shard count online, and periodic schedules (state,
// pause, resume). It is a face of the public inspect
// package and reads the same configuration as the scheduler and worker
// binaries: built-in defaults, the YAML file of --config, HOURGLASS_*
// environment variables and --set key=value flags, in rising precedence
// (it uses redis, namespace, shards, etcd and periodic).
//
// Usage:
//
//	hourglass [--config file.yaml] [-o table|json] <noun> <verb> [args]
//
// Exit codes: 0 done; 1 the operation failed (Redis unreachable, ...);
// 2 usage error (unknown command, bad flag or argument, invalid config);
// 3 not found (no such task, dead letter or queue); 4 refused (a running
// task cannot be cancelled; an operation that asks (queue rm, schedule
// rm, shards resize, bulk dlq replay and purge) was not confirmed, which
// without a terminal needs --yes; another change of the shard count
// runs). Errors go to stderr,
// prefixed "hourglass: " once (the exit code tells their kind).
//
// See docs/cli.md for every verb and its JSON output.
package main

import (
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
