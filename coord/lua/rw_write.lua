-- rw_write.lua: take the write lease on a read-write lock if nobody holds
-- it; otherwise leave (or refresh) a "writer waiting" marker that keeps
-- new readers out until the writer gets in, gives up, or stops refreshing
-- the marker.
--
-- KEYS[1] writer   STRING writer token; its expiry (PX) is the write lease
-- KEYS[2] readers  ZSET reader id -> expiry (server ms)
-- KEYS[3] waiting  ZSET waiting writer token -> marker expiry (server ms)
-- KEYS[4] fence    STRING fencing counter (INCR); never expires; touched
--                  only when ARGV[3] is "1"
-- ARGV[1] writer token (random, unique)
-- ARGV[2] lease in ms
-- ARGV[3] "1" to draw a fencing token, "0" not to
-- ARGV[4] marker lifetime in ms; "0" leaves no marker (a try that will
--         not wait)
--
-- Returns {1, fence} when taken (fence is 0 without fencing), or
-- {0, wait_ms}: the ms after which the blocker (the writer's lease, or the
-- earliest reader's lease) is gone even if nobody releases it.
local now = now_ms()
redis.call("ZREMRANGEBYSCORE", KEYS[3], "-inf", now)
local function mark()
  local life = tonumber(ARGV[4])
  if life > 0 then
    redis.call("ZADD", KEYS[3], now + life, ARGV[1])
    expire_at_last(KEYS[3])
  end
end
local pttl = redis.call("PTTL", KEYS[1])
if pttl ~= -2 then
  mark()
  if pttl < 0 then pttl = tonumber(ARGV[2]) end
  return {0, pttl}
end
redis.call("ZREMRANGEBYSCORE", KEYS[2], "-inf", now)
local r = redis.call("ZRANGE", KEYS[2], 0, 0, "WITHSCORES")
if r[2] then
  mark()
  return {0, tonumber(r[2]) - now}
end
redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
redis.call("ZREM", KEYS[3], ARGV[1])
local fence = 0
if ARGV[3] == "1" then
  fence = redis.call("INCR", KEYS[4])
end
return {1, fence}
