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
local out = {}
for i = 1, #ARGV, 2 do
  local id = ARGV[i]
  if redis.call("HGET", KEYS[3], id) ~= ARGV[i + 1] then
    out[#out + 1] = 0
  else
    redis.call("ZREM", KEYS[2], id)
    redis.call("HDEL", KEYS[3], id)
    redis.call("HDEL", KEYS[1], id)
    redis.call("HDEL", KEYS[4], id)
    out[#out + 1] = 1
  end
end
return out
