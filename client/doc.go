// Package client is Hourglass's producer API: enqueue tasks to run later,
// in batches or one by one, change them while they wait (Reschedule,
// Replace, Task.OnConflict), cancel them and look up their state.
//
// A Client needs only a go-redis client and the deployment's namespace
// and shard count, which must match the schedulers' configuration. Each
// enqueue is one round trip (one Lua script call, see docs/protocol.md);
// EnqueueBatch sends any number of tasks in one pipelined round trip.
//
// EnqueueOf enqueues a typed payload, encoded by Config.Codec (JSON
// unless set), for a worker.Typed handler that decodes it into the same
// type; Encode does the same for the Tasks of a batch.
//
// Due times are computed by Redis's clock, not the producer's, when a
// Delay is given; At is an absolute time with millisecond precision.
//
// Lookup and Cancel report a task as package inspect does: Lookup
// returns hourglass.TaskInfo (inspect.Task is the same type), Cancel the
// hourglass.State the task was cancelled from.
//
// Errors are sentinel values to test with errors.Is: ErrDuplicate,
// ErrUnknownQueue, ErrPayloadTooLarge, ErrInvalidArgument, ErrNotFound,
// ErrActive, ErrDead. They are package hourglass's, shared with worker and
// inspect: an error matches the same name in every package.
//
// Any other error from Enqueue or EnqueueBatch (a broken connection,
// Redis restarting or failing over) leaves the outcome unknown: the
// script may have stored the task before its reply was lost. The client
// retries such errors with the same ids for Config.RetryFor; retrying
// yourself with the same Task.ID is safe too, and ErrDuplicate then
// means the task is stored. Never retry with a new id.
package client
