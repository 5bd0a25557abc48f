// Package worker consumes Hourglass tasks: register a Handler per queue,
// then Run. A Worker takes due tasks from every shard's ready lists of its
// queues with blocking pops and starts each handler at once: a ready
// entry carries its task. A handler still running after
// QueueOptions.LeaseAfter (100ms in DefaultQueueOptions) gets a lease
// (the visibility timeout), extended while it runs; one done sooner is
// acknowledged without ever taking one. Until leased, a task whose worker
// dies is taken back by the scheduler's recovery after about a second,
// counting a failed attempt. Acknowledgements go to Redis in batches: one
// may wait up to Config.AckLinger (2ms in DefaultConfig) for others to
// share its round trip.
//
// # Defaults
//
// DefaultConfig and DefaultQueueOptions hold the defaults, those the
// worker binary runs with; start from them. A zero field means the
// default where the setting cannot be off (a zero RegistrationWait is
// DefaultRegistrationWait), and off where it can: a zero ShutdownGrace,
// AckLinger, HandlerTimeout or LeaseAfter means no grace, no linger, no
// bound, lease first, as the binary's configuration keys' 0 does.
//
// A scheduler with scheduler.prefetch moves tasks into ready lists ahead
// of their due time. The worker holds such a task until Task.Due on the
// clock of the Redis server that holds it (which it reads with TIME,
// bracketed by its own clock: never early however far its own clock is
// off), then runs it as above; a task
// still unleased MaxLeaseAfter after its pop is leased then. A due time
// further ahead than any mover moves a task (shard.MaxHold) is not
// waited for, or, when Redis's clock could not be read, only that long. While it waits, a
// held task gives its handler slot back (except in a queue under flow
// control), so up to Concurrency held tasks do not keep the worker from
// popping due ones (more are held in their slots); it takes a slot back
// when due, ahead of new pops, and no more than Concurrency handlers of
// a queue ever run at once: a held task that finds them all busy waits
// for one at most the hold limit, then is given back.
//
// Outcome of a handler:
//   - nil: the task is acknowledged and deleted (auto-ack).
//   - an error: the delivery is nacked; the task is retried after the
//     queue's exponential backoff with jitter, or dead-lettered once its
//     retries are spent, with the error kept as its last error.
//   - NoRetry(err): dead-lettered at once.
//   - RetryAfter(d, err): retried after d instead of the backoff.
//   - a panic: recovered, logged at error level with the task's id, the
//     panic value and the goroutine's stack (keys "task", "panic",
//     "stack"), and counted as an error: "handler panic: <value>" is the
//     attempt's error, so the task is retried or dead-lettered as above.
//
// With QueueOptions.ManualAck the handler's nil return means "not done
// yet": the lease keeps being extended until Task.Ack or Task.Nack is
// called (from any goroutine).
//
// If the lease is lost (the worker was cut off from Redis for longer than
// the lease and recovery re-scheduled the task), the handler's ctx is
// cancelled with cause ErrLeaseLost and its late ack is rejected as
// stale (counted in hourglass_worker_stale_tokens_total).
//
// A task cancelled while this worker runs (or holds) it (client.Cancel,
// hourglass task cancel, from any process) has already ended in Redis:
// the worker hears it on the deployment's cancel channel and cancels the
// handler's ctx with cause ErrCancelled; whatever the handler returns
// then is not recorded (hourglass_worker_cancelled_total).
//
// # Logging
//
// Config.Slog takes a *slog.Logger; Config.Logger an hclog.Logger, the
// binaries' logger. Records have constant messages and keys ("task",
// "queue", "error", ...); the component is the attribute "logger"
// ("worker") with Slog, the logger's name with hclog. With neither set,
// the worker logs to slog.Default(), so that a warning (a queue's setup
// differs from the schedulers', a fetch fails) is seen; give a logger
// whose handler discards (slog.DiscardHandler) to silence it.
//
// # Typed payloads
//
// Typed adapts a HandlerOf[T], which receives the payload decoded into a
// T, to a Handler: JSON by default (producers enqueue with
// client.EnqueueOf), another codec.Codec with TypedWith. A payload that
// does not decode is a permanent failure: the handler is not called and
// the task is dead-lettered at once, its error (wrapping
// ErrPayloadDecode) naming the type and the decode error.
//
// # Registration
//
// The schedulers register each queue (its policy: retries, timeout,
// payload limit, backoff) in every shard of their namespace, from their
// configuration at start or at run time (inspect.SetQueue, hourglass
// queue set); a producer's enqueue to a queue not registered fails with
// client.ErrUnknownQueue. Run checks that every queue given to Handle is
// registered in Config.Namespace. One that no shard registers is waited
// for, from Run's start, for Config.RegistrationWait (one minute unless
// set: a scheduler started with the worker, as in a rolling deploy,
// registers its queues within seconds), looking every second while the
// registered queues are consumed; then Run shuts down as when its ctx
// ends and returns a *RegistrationError, which matches ErrNotRegistered
// and names the namespace, the queues missing, the queues the namespace
// registers (none: no scheduler runs with it) and, for a worker outside
// DefaultNamespace, those of the missing queues that DefaultNamespace
// registers. A wrong namespace or queue name thus fails within the wait
// instead of consuming nothing. So does a Redis user whose ACL refuses
// the namespace's keys (NOPERM: an ACL written for another namespace):
// RegistrationError.Denied says so. Reads that fail otherwise (Redis
// unreachable) decide nothing: the first one that succeeds after the wait
// does. Only the start is checked this way: a queue seen registered that
// disappears later (Redis lost its data; the schedulers register theirs
// again), a queue registered in some shards only (the shard counts
// differ) or a removed queue still draining is logged and shown by the
// metrics, not fatal.
//
// A worker does not register the queues it handles, and there is no
// option to make it: register a queue with the schedulers first, then
// deploy its producers and workers. asynq and River need no registration
// because their worker processes are also their schedulers; here only a
// scheduler of the namespace moves a queue's due tasks to its ready list,
// recovers its expired leases and holds its policy, and the registration
// says that one does. A self-registering worker in a wrong namespace
// would make its queue accept tasks that no scheduler ever makes due, the
// silent failure this check exists to end, and its policy would be a
// second writer beside the schedulers' configuration (docs/operations.md,
// "A worker whose queues are not registered fails").
//
// # Redis connections
//
// A Worker uses one connection for its blocking fetch (BLMPOP over every
// ready list it consumes) plus one more for each queue under flow control
// (QueueOptions.MaxConcurrency or Rate: such a queue has a fetch loop of
// its own), one pub/sub connection for pause announcements (and one for
// permit waiters when a queue has MaxConcurrency; on a Redis Cluster, one
// per node for ready announcements), and the go-redis pool for leases, acks and extensions,
// whose size is the client's PoolSize. The count does not grow with
// shards or concurrency, nor with queues that have no flow control.
//
// # Shutdown
//
// When Run's ctx ends the worker stops fetching, lets running handlers
// finish for Config.ShutdownGrace, then cancels the rest and releases
// their tasks back to their ready lists at once (no attempt counted, no
// wait for a lease to expire).
package worker
