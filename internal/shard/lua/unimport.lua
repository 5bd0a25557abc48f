-- unimport.lua: remove imported tasks that were cancelled in their old
-- shard while they were on their way (commit.lua found no outbox entry),
-- if they are still as imported: scheduled or dead, with the same data.
-- A task that changed (it became due and ran) is left as it is.
--
-- Task data of encoding version 2 names its queue by number: the script
-- reads the name from the shard's queues hash ({tag}:queues, not
-- declared, in the shard's slot; lib.lua's queue_name), and fails with
-- "TRYAGAIN ...", nothing written, while that hash is not on the node.
--
-- Each id is also recorded as imported in this change (KEYS[8]), whether
-- or not a copy was there: an owner paused between its export and its
-- import (its lease expired, the next owner resumed the batch) may still
-- send that import, which no epoch fences (it runs on this shard), after
-- the cancelled entry was forgotten. import.lua then skips the id instead
-- of storing a task its user cancelled.
--
-- KEYS[1] delayed    ZSET  task id -> due ms
-- KEYS[2] tasks      HASH  task id -> encoded task
-- KEYS[3] counts     HASH  task counts (lib.lua's count)
-- KEYS[4] dead       ZSET  task id -> time buried
-- KEYS[5] dead info  HASH  task id -> JSON burial record
-- KEYS[6] errors     HASH  task id -> last error
-- KEYS[7] inflight   ZSET  task id -> lease deadline ms
-- KEYS[8] imported   SET   ids imported during this change (import.lua);
--                          it expires a day after the last write
-- ARGV[1] pending key prefix of this shard (a queue name follows; not
--         declared: checked with lib.lua's served_here)
-- ARGV[2..] pairs: task id, the outbox entry it was imported from
--
-- Returns the number of tasks removed.
local qn = queue_names(KEYS[2])
local plan, pending = {}, {}
for i = 2, #ARGV, 2 do
  local e = cmsgpack.unpack(ARGV[i + 1])
  local q = blob_queue(e[3], qn)
  plan[#plan + 1] = {id = ARGV[i], kind = e[1], blob = e[3], queue = q}
  if q ~= "" then pending[#pending + 1] = ARGV[1] .. q end
end
local moving = served_here(KEYS[1], pending)
if moving then return moving end
local removed = 0
for _, p in ipairs(plan) do
  redis.call("SADD", KEYS[8], p.id)
  -- (a dead letter without data was imported with empty data)
  if (redis.call("HGET", KEYS[2], p.id) or "") == p.blob then
    local gone = false
    if p.kind == "x" then
      gone = redis.call("ZREM", KEYS[4], p.id) == 1
      if gone then redis.call("HDEL", KEYS[5], p.id) end
    elseif redis.call("ZREM", KEYS[1], p.id) == 1 then
      gone = true
    elseif p.queue ~= "" and not redis.call("ZSCORE", ARGV[1] .. p.queue, p.id)
        and not redis.call("ZSCORE", KEYS[7], p.id) then
      gone = true -- in the far tier: its bucket entry is dropped at promotion
    end
    if gone then
      redis.call("HDEL", KEYS[2], p.id)
      redis.call("HDEL", KEYS[6], p.id)
      count(KEYS[3], p.kind == "x" and "d" or "s", p.queue, -1)
      removed = removed + 1
    end
  end
end
if #plan > 0 then redis.call("EXPIRE", KEYS[8], 86400) end
return removed
