-- ack.lua: deliveries succeeded; delete their tasks.
--
-- KEYS[1] tasks      HASH  task id -> encoded task
-- KEYS[2] inflight   ZSET  task id -> lease deadline ms
-- KEYS[3] leases     HASH  task id -> delivery token
-- KEYS[4] errors     HASH  task id -> last error
-- ARGV pairs: task id, delivery token (any number of pairs, one shard)
--
-- Returns one integer per pair: 1 when acknowledged, 0 when the token is
-- not the task's current one (the lease expired and the task was
-- re-delivered or rescheduled); that task is left unchanged.
-- One command per kind for the whole batch.
local ids = {}
for i = 1, #ARGV, 2 do ids[#ids + 1] = ARGV[i] end
local out, done = {}, {}
for i = 1, #ids, 1000 do
  local tokens = redis.call("HMGET", KEYS[3], unpack(ids, i, math.min(i + 999, #ids)))
  for j, tok in ipairs(tokens) do
    local k = i + j - 1
    if tok and tok == ARGV[2 * k] then
      out[k] = 1
      done[#done + 1] = ids[k]
    else
      out[k] = 0
    end
  end
end
if #done > 0 then
  bulk("ZREM", KEYS[2], done)
  bulk("HDEL", KEYS[3], done)
  bulk("HDEL", KEYS[1], done)
  bulk("HDEL", KEYS[4], done)
end
return out
