-- extend.lua: push a running delivery's lease deadline forward.
--
-- KEYS[1] inflight   ZSET  task id -> lease deadline ms
-- KEYS[2] leases     HASH  task id -> delivery token
-- ARGV[1] task id
-- ARGV[2] delivery token
-- ARGV[3] lease in ms from now (Redis time)
--
-- Returns the new deadline (ms), or 0 when the token is stale.
if redis.call("HGET", KEYS[2], ARGV[1]) ~= ARGV[2] then
  return 0
end
local deadline = now_ms() + tonumber(ARGV[3])
redis.call("ZADD", KEYS[1], "XX", deadline, ARGV[1])
return deadline
