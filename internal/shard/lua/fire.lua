-- fire.lua: fire one occurrence of a periodic schedule: enqueue its task
-- and record the occurrence as the schedule's last, atomically, so an
-- occurrence is enqueued at most once whoever fires it and whenever its
-- task completes. Run by the owner of the schedule's shard, fenced by its
-- epoch. The Go code sends this text, then enqueue.lua's (scripts.go):
-- what follows this prologue is the enqueue protocol for the one task.
--
-- KEYS[1..5] as enqueue.lua: delayed, tasks, queues, far, counts
-- KEYS[6] periodic HASH  schedule name -> last occurrence fired or
--                        skipped (unix ms); "<name>|task" -> the last
--                        occurrence whose task was enqueued (the one
--                        overlap skip waits for)
-- KEYS[7] epoch    STRING fencing epoch of the current owner
-- KEYS[8] stats    HASH  counters (stale_epoch)
-- ARGV[1..7] as enqueue.lua, with one task: wake channel, id (the
--         occurrence's task id), due, queue, max retries, timeout, payload
-- ARGV[8]  schedule name
-- ARGV[9]  occurrence (unix ms)
-- ARGV[10] caller's epoch
-- ARGV[11] "" to enqueue; "paused" to record the occurrence as skipped
--          without a task; or the task id of the last occurrence enqueued
--          ("<name>|task"), to skip this one while that task is still
--          stored (overlap policy skip)
--
-- Returns {code, due_ms, detail}:
--   enqueue.lua's reply for the task (1 enqueued, 0 duplicate, -1..-3
--   refused: the occurrence is recorded all the same, refused for good)
--   { 5, last, ""}        the occurrence is not after the last one
--                         recorded: already fired (or skipped); nothing
--                         changed
--   { 6, occurrence, id}  skipped: the previous occurrence's task id is
--                         still stored (recorded as the last)
--   { 7, occurrence, ""}  skipped: paused (recorded as the last)
--   {-10, stored, ""}     ARGV[10] is older than the stored epoch
local ok, stored = fence(KEYS[7], KEYS[8], ARGV[10])
if not ok then
  return {-10, stored, ""}
end
local name, occ, mode = ARGV[8], ARGV[9], ARGV[11]
local last = redis.call("HGET", KEYS[6], name)
if last and tonumber(occ) <= tonumber(last) then
  return {5, tonumber(last), ""}
end
redis.call("HSET", KEYS[6], name, occ)
if mode == "paused" then
  return {7, tonumber(occ), ""}
end
if mode ~= "" and redis.call("HEXISTS", KEYS[2], mode) == 1 then
  return {6, tonumber(occ), mode}
end
redis.call("HSET", KEYS[6], name .. "|task", occ)
for i = #ARGV, 8, -1 do ARGV[i] = nil end
-- enqueue.lua follows.
