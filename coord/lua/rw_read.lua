-- rw_read.lua: take a read lease on a read-write lock if no writer holds
-- it and no writer waits for it (writer preference).
--
-- KEYS[1] writer   STRING writer token; its expiry (PX) is the write lease
-- KEYS[2] readers  ZSET reader id -> expiry (server ms)
-- KEYS[3] waiting  ZSET waiting writer token -> marker expiry (server ms)
-- ARGV[1] reader id (random, unique)
-- ARGV[2] lease in ms
--
-- Returns {1, 0} when taken, or {0, wait_ms}: the ms after which the
-- blocker (the writer's lease, or the earliest waiting writer's marker)
-- is gone even if nobody releases it.
local now = now_ms()
local pttl = redis.call("PTTL", KEYS[1])
if pttl ~= -2 then
  if pttl < 0 then pttl = tonumber(ARGV[2]) end
  return {0, pttl}
end
redis.call("ZREMRANGEBYSCORE", KEYS[3], "-inf", now)
local w = redis.call("ZRANGE", KEYS[3], 0, 0, "WITHSCORES")
if w[2] then
  return {0, tonumber(w[2]) - now}
end
redis.call("ZREMRANGEBYSCORE", KEYS[2], "-inf", now)
redis.call("ZADD", KEYS[2], now + tonumber(ARGV[2]), ARGV[1])
expire_at_last(KEYS[2])
return {1, 0}
