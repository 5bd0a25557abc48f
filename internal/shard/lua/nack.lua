-- nack.lua: a delivery failed; retry it later or bury it.
--
-- Task data of encoding version 2 names its queue by number: the script
-- reads the name from the shard's queues hash ({tag}:queues, not
-- declared, in the shard's slot; lib.lua's queue_name), and fails with
-- "TRYAGAIN ...", nothing written, while that hash is not on the node.
--
-- KEYS[1] delayed    ZSET  task id -> due ms
-- KEYS[2] tasks      HASH  task id -> encoded task
-- KEYS[3] inflight   ZSET  task id -> lease deadline ms
-- KEYS[4] leases     HASH  task id -> delivery token
-- KEYS[5] errors     HASH  task id -> last error
-- KEYS[6] dead       ZSET  task id -> time buried
-- KEYS[7] dead info  HASH  task id -> JSON {reason, error, at}
-- KEYS[8] queues     HASH  queue -> policy (for the default backoff)
-- KEYS[9] counts     HASH  task counts (see lib.lua's count)
-- KEYS[10] pending   ZSET  pending ids of the task's queue; optional, for
--                          a delivery run without a lease yet
-- ARGV[1] task id
-- ARGV[2] delivery token (a lease's, or the popped entry's number)
-- ARGV[3] error text (kept as the task's last error)
-- ARGV[4] "retry" or "dead" (the handler asked not to retry)
-- ARGV[5] retry delay in ms, or "" for exponential backoff
-- ARGV[6] backoff "base_ms|cap_ms|factor", or "" for the queue's policy
-- ARGV[7] random number in [0,1) for the backoff's jitter
-- ARGV[8] wake channel of the shard
-- ARGV[9] prefix of the task's done channel (the id is appended): a task
--         buried here whose queue keeps records of its ended tasks is
--         published "dead" there (Client.Wait)
-- ARGV[10] optional: the span id of the failed attempt, 16 hex digits,
--         kept in a traced task's trace context so that the next
--         attempt's span links to it (docs/protocol.md, "Traces"); ""
--         or absent keeps the one there
--
-- Returns {1, due_ms, attempts} rescheduled, {2, 0, attempts} buried,
-- {0, 0, 0} stale token, {-1, 0, 0} undecodable task (buried).
local qn = queue_names(KEYS[2])
local id, err = ARGV[1], ARGV[3]
-- The task is read before anything is written: reading a version 2
-- queue's name may fail with TRYAGAIN (lib.lua's queue_name).
local blob = redis.call("HGET", KEYS[2], id)
local queue = blob_queue(blob, qn)
local task, why = decode(blob, qn)
local ended = end_delivery(KEYS[3], KEYS[4], KEYS[10], id, ARGV[2])
if not ended then
  return {0, 0, 0}
end
local now = now_ms()
if ended == "lease" then count(KEYS[9], "l", queue, -1) end
if not task then
  bury(KEYS[6], KEYS[7], id, now, why, err, KEYS[9], queue)
  return {-1, 0, 0}
end
task.attempts = task.attempts + 1
if task.tctx and ARGV[10] and string.match(ARGV[10], "^[0-9a-f]+$") and #ARGV[10] == 16 then
  task.tctx = string.sub(task.tctx, 1, 56) .. ARGV[10]
end

-- buried ends the task in the dead-letter set for reason.
local function buried(reason)
  redis.call("HSET", KEYS[2], id, encode(task, blob))
  bury(KEYS[6], KEYS[7], id, now, reason, err, KEYS[9], queue)
  redis.call("HDEL", KEYS[5], id)
  if ARGV[9] and keep_of(KEYS[8], queue) then redis.call("PUBLISH", ARGV[9] .. id, "dead") end
  return {2, 0, task.attempts}
end
if ARGV[4] == "dead" then
  return buried("not retryable")
end
if task.attempts > task.max_retries then
  return buried("max retries exhausted")
end
local delay = tonumber(ARGV[5])
if not delay then
  local spec = ARGV[6]
  if spec == "" then spec = policy_backoff(redis.call("HGET", KEYS[8], task.queue)) end
  delay = backoff_ms(spec, task.attempts, tonumber(ARGV[7]) or 0)
end
task.due = now + delay
redis.call("HSET", KEYS[2], id, encode(task, blob))
redis.call("HSET", KEYS[5], id, err)
schedule(KEYS[1], ARGV[8], id, task.due)
count(KEYS[9], "s", queue, 1)
return {1, task.due, task.attempts}
