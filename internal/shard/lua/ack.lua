-- ack.lua: a delivery succeeded; delete the task.
--
-- KEYS[1] tasks      HASH  task id -> encoded task
-- KEYS[2] inflight   ZSET  task id -> lease deadline ms
-- KEYS[3] leases     HASH  task id -> delivery token
-- KEYS[4] errors     HASH  task id -> last error
-- ARGV[1] task id
-- ARGV[2] delivery token
--
-- Returns 1 when acknowledged, 0 when the token is not the task's current
-- one (the lease expired and the task was re-delivered or rescheduled).
if redis.call("HGET", KEYS[3], ARGV[1]) ~= ARGV[2] then
  return 0
end
redis.call("ZREM", KEYS[2], ARGV[1])
redis.call("HDEL", KEYS[3], ARGV[1])
redis.call("HDEL", KEYS[1], ARGV[1])
redis.call("HDEL", KEYS[4], ARGV[1])
return 1
