-- sem_acquire.lua: take one permit of a semaphore if one is free.
--
-- KEYS[1] permits ZSET permit id -> expiry (server ms)
-- ARGV[1] permit id (random, unique)
-- ARGV[2] number of permits
-- ARGV[3] lease in ms
--
-- Expired permits are purged first. Returns {1, expiry_ms} when taken,
-- or {0, wait_ms}: the ms until the earliest permit expires, after which
-- a permit is free even if nobody releases one.
local now = now_ms()
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", now)
if redis.call("ZCARD", KEYS[1]) < tonumber(ARGV[2]) then
  local expiry = now + tonumber(ARGV[3])
  redis.call("ZADD", KEYS[1], expiry, ARGV[1])
  expire_at_last(KEYS[1])
  return {1, expiry}
end
local first = redis.call("ZRANGE", KEYS[1], 0, 0, "WITHSCORES")
return {0, tonumber(first[2]) - now}
