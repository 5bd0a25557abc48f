-- move.lua: move due tasks of one shard into their queues' ready lists.
-- Run only by the shard's owner; fenced by epoch; bounded by LIMIT.
--
-- KEYS[1] delayed    ZSET  task id -> due ms
-- KEYS[2] tasks      HASH  task id -> encoded task
-- KEYS[3] epoch      STRING fencing epoch of the current owner
-- KEYS[4] dead       ZSET  task id -> time buried (ms)
-- KEYS[5] dead info  HASH  task id -> JSON {reason, error, at}
-- KEYS[6] stats      HASH  counters (stale_epoch)
-- KEYS[7] seq        STRING sequence counter of the shard
-- KEYS[8] ready queues SET  queues that have had ready ids in this shard
-- ARGV[1] caller's epoch (etcd revision of its ownership)
-- ARGV[2] LIMIT: most tasks to move in this call
-- ARGV[3] ready-list key prefix of this shard; the queue name is appended
-- ARGV[4] pending key prefix of this shard; the queue name is appended
--
-- Returns {1, moved, next_due, now, buried, lateness_1, ..., lateness_n}
--   moved     tasks pushed to ready lists (plus buried = tasks examined)
--   next_due  due ms of the earliest remaining task, -1 if none
--   now       Redis server time used, unix ms
--   buried    tasks moved to the dead-letter set (no or undecodable data)
--   lateness_i  now - due of each moved task, ms
-- or {-1, stored_epoch} when ARGV[1] is older than the stored epoch.
local ok, stored = fence(KEYS[3], KEYS[6], ARGV[1])
if not ok then
  return {-1, stored}
end

local now = now_ms()
local due = redis.call("ZRANGE", KEYS[1], "-inf", now, "BYSCORE",
  "LIMIT", 0, tonumber(ARGV[2]), "WITHSCORES")

local out = {1, 0, -1, now, 0}
local moved, buried = 0, 0
local queues = {}
for i = 1, #due, 2 do
  local id, score = due[i], tonumber(due[i + 1])
  redis.call("ZREM", KEYS[1], id)
  local task, why = decode(redis.call("HGET", KEYS[2], id))
  if task then
    make_ready(KEYS[7], ARGV[4] .. task.queue, ARGV[3] .. task.queue, id)
    queues[task.queue] = true
    moved = moved + 1
    out[#out + 1] = now - score
  else
    bury(KEYS[4], KEYS[5], id, now, why, "")
    buried = buried + 1
  end
end

for q in pairs(queues) do
  redis.call("SADD", KEYS[8], q)
end

local head = redis.call("ZRANGE", KEYS[1], 0, 0, "WITHSCORES")
if head[2] then out[3] = tonumber(head[2]) end
out[2] = moved
out[5] = buried
return out
