-- fire.lua: fire one occurrence of a periodic schedule: enqueue its task
-- and record the occurrence as the schedule's last, atomically, so an
-- occurrence is enqueued at most once whoever fires it and whenever its
-- task completes. Run by the owner of the schedule's shard, fenced by its
-- epoch. The enqueue protocol runs as the function enqueue_protocol,
-- enqueue.lua's text as it is (the include line below; luascript
-- assembles it), and the occurrence is recorded only after it returned a
-- reply rather than an error (TRYAGAIN during a slot migration writes
-- nothing, so the retry finds the occurrence still to fire).
--
-- @include: enqueue.lua as enqueue_protocol
--
-- KEYS[1..5] as enqueue.lua: delayed, tasks, queues, far, counts
-- KEYS[6] periodic HASH  schedule name -> last occurrence fired or
--                        skipped (unix ms); "<name>|task" -> the id of
--                        the last task the schedule enqueued (the one
--                        overlap skip waits for); "<name>|fired" -> the
--                        last occurrence whose task was stored (enqueued
--                        or found live), not skipped nor refused
-- KEYS[7] epoch    STRING fencing epoch of the current owner
-- KEYS[8] stats    HASH  counters (stale_epoch)
-- KEYS[9] history  LIST  optional: the schedule's last 100 outcomes,
--                        newest first, each JSON {occ, outcome, at,
--                        id, detail, caught, count}: outcome "fired",
--                        "duplicate" (its task was found live), "refused"
--                        (detail: why), "skipped" (detail: "paused",
--                        "overlap" or "busy"); caught 1 for an occurrence
--                        caught up after it was missed (ARGV[12]). The
--                        list expires 30 days after its last entry.
-- ARGV[1..7] as enqueue.lua, with one task: wake channel, id (the
--         occurrence's task id), due, queue, max retries, timeout, payload
-- ARGV[8]  schedule name
-- ARGV[9]  occurrence (unix ms)
-- ARGV[10] caller's epoch
-- ARGV[11] "" to enqueue; "paused" to record the occurrence as skipped
--          without a task; "overlap" to skip it (recorded) while the
--          schedule's last task ("<name>|task") is still stored; "busy"
--          to skip it (recorded) because the caller found that task
--          stored in another shard (the shard count changed since);
--          "policy": see ARGV[13..15]
-- ARGV[12] optional: "1" when the occurrence is caught up (missed while
--          no scheduler ran), for the history
-- ARGV[13..15] with ARGV[11] "policy": the catch-up policy skipped the
--          occurrences from ARGV[13] (unix ms) to ARGV[9], ARGV[14] of
--          them, for the reason ARGV[15]: recorded as the last, without
--          a task, and as one entry of the history
--
-- Returns {code, due_ms, detail}:
--   enqueue.lua's reply for the task (1 enqueued, 0 duplicate, -1..-3
--   refused: the occurrence is recorded all the same, refused for good),
--   or its error (nothing written)
--   { 5, last, ""}        the occurrence is not after the last one
--                         recorded: already fired (or skipped); nothing
--                         changed
--   { 6, occurrence, id}  skipped: the schedule's last task, id, is still
--                         stored (recorded as the last)
--   { 7, occurrence, ""}  skipped: paused (recorded as the last)
--   { 9, occurrence, ""}  skipped by the catch-up policy (ARGV[13..15];
--                         recorded as the last)
--   { 8, 0, ""}           the schedule was handed over to another home
--                         shard (handoff.lua): nothing changed
--   {-10, stored, ""}     ARGV[10] is older than the stored epoch
local ok, stored = fence(KEYS[7], KEYS[8], ARGV[10])
if not ok then
  return {-10, stored, ""}
end
local name, occ, mode, task_id, caught = ARGV[8], ARGV[9], ARGV[11], ARGV[2], ARGV[12] == "1"

-- record adds the occurrence's outcome to the schedule's history: id is
-- its task's, for one whose task is stored; first and count, for a skip
-- by the catch-up policy, the first skipped and how many.
local function record(outcome, detail, id, first, count)
  if not KEYS[9] then return end
  redis.call("LPUSH", KEYS[9], cjson.encode({occ = tonumber(first or occ), outcome = outcome, at = now_ms(),
    id = id or "", detail = detail or "", caught = caught and 1 or 0, count = count or 1}))
  redis.call("LTRIM", KEYS[9], 0, 99)
  redis.call("PEXPIRE", KEYS[9], 2592000000)
end
local last = redis.call("HGET", KEYS[6], name)
if last and string.sub(last, 1, 6) == "moved:" then
  return {8, 0, ""}
end
if last and tonumber(occ) <= tonumber(last) then
  return {5, tonumber(last), ""}
end
if mode == "policy" then
  -- Missed and not fired, by the catch-up policy: recorded once, as the
  -- last, so that a later pass does not skip them again.
  redis.call("HSET", KEYS[6], name, occ)
  record("skipped", ARGV[15], nil, ARGV[13], tonumber(ARGV[14]))
  return {9, tonumber(occ), ""}
end
if mode == "paused" then
  redis.call("HSET", KEYS[6], name, occ)
  record("skipped", "paused")
  return {7, tonumber(occ), ""}
end
if mode == "busy" then
  redis.call("HSET", KEYS[6], name, occ)
  local watched = redis.call("HGET", KEYS[6], name .. "|task") or ""
  record("skipped", "busy: the last task, " .. watched .. ", is still stored")
  return {6, tonumber(occ), watched}
end
if mode == "overlap" then
  local watched = redis.call("HGET", KEYS[6], name .. "|task")
  if watched and redis.call("HEXISTS", KEYS[2], watched) == 1 then
    redis.call("HSET", KEYS[6], name, occ)
    record("skipped", "overlap: the last task, " .. watched .. ", is still stored")
    return {6, tonumber(occ), watched}
  end
end
-- enqueue.lua gets the wake channel and one task, ARGV[1..7].
for i = #ARGV, 8, -1 do ARGV[i] = nil end
local reply = enqueue_protocol()
if reply.err then
  return reply
end
if reply[1] == 1 or reply[1] == 0 then
  -- Its task is stored (enqueued, or found live): the last fired.
  redis.call("HSET", KEYS[6], name, occ, name .. "|task", task_id, name .. "|fired", occ)
  record(reply[1] == 1 and "fired" or "duplicate", nil, task_id)
else
  redis.call("HSET", KEYS[6], name, occ, name .. "|task", task_id)
  local why = ({[-1] = "unknown or removed queue ", [-2] = "payload larger than the queue's max_payload, "})[reply[1]] or ""
  record("refused", why .. tostring(reply[3]))
end
return reply
