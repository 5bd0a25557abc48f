// Package executor builds the worker.Handler values of the standalone
// worker binary (cmd/worker): a queue's tasks are delivered either to an
// HTTP endpoint ([HTTP]) or to a program ([Command]), as configured by
// queues.<name>.http and queues.<name>.command.
//
// # HTTP
//
// Each task is one request to the configured URL (POST unless PUT is
// configured) with the payload as its body and these headers:
//
//	Content-Type           application/octet-stream (a configured header may replace it)
//	Hourglass-Task-Id      the task's id
//	Hourglass-Queue        the queue's name
//	Hourglass-Attempt      1 for the first delivery, 2 for the first retry, ...
//	Hourglass-Due          when the task was due, RFC 3339 in UTC with milliseconds
//	Hourglass-Due-Ms       the same, in Unix milliseconds
//	Hourglass-Enqueued-Ms  when the task was stored, in Unix milliseconds
//	Traceparent            with tracing on (tracing.exporter), the W3C traceparent of the handler's span
//
// plus the configured headers, which cannot replace the Hourglass-
// headers. The answer decides the task's fate:
//
//   - 2xx: done (acknowledged), whatever other headers say; in a queue
//     that keeps records of its ended tasks (queues.<q>.retention) a body
//     of up to 64 KiB ([worker.MaxResult]) is the task's result, which
//     client.Result and client.Wait return (a longer one is not kept);
//   - any other status with a valid Retry-After header (delta-seconds or an
//     HTTP date), typically 429 or 503: retried after that delay, counting
//     an attempt ([worker.RetryAfter]);
//   - any other status: retried after the queue's backoff, with the error
//     "http <status>: <first 256 bytes of the body>";
//   - no answer (connection refused, TLS failure, timeout): retried after
//     the backoff.
//
// # Commands
//
// Each task runs the configured argv directly (no shell) with the payload
// on stdin and HOURGLASS_TASK_ID, HOURGLASS_QUEUE, HOURGLASS_ATTEMPT,
// HOURGLASS_DUE_MS and HOURGLASS_ENQUEUED_MS (and, with tracing on,
// TRACEPARENT: the W3C traceparent of the handler's span) added to the
// worker's environment, from which every other HOURGLASS_ variable is removed:
// those configure the worker and may hold its Redis password. Stdout is
// discarded; the last 512 bytes of stderr become the error message.
//
//   - exit status 0: done;
//   - exit status 65 (EX_DATAERR from sysexits.h): the task is
//     dead-lettered at once ([worker.NoRetry]); this is the only way for a
//     program to refuse retries;
//   - any other status, including 75 (EX_TEMPFAIL), or death by a signal:
//     retried after the queue's backoff.
//
// The program runs in a process group of its own. When the handler's ctx
// ends (the handler timeout, a lost lease, the end of the shutdown grace)
// the whole group is killed with SIGKILL and the handler returns an error
// wrapping ctx.Err(). When the program exits, whatever it left running in
// its group is killed too, so no task leaves processes behind (a program
// that must outlive its task has to leave the group, e.g. with setsid).
package executor
