-- sliding_window.lua: sliding-window log. Each admitted unit is a ZSET
-- member scored by its server time in microseconds; a call admits cost
-- units only if, with them, the window (now - W, now] holds at most limit
-- units. Exact: no interval of length W ever holds more than limit.
--
-- KEYS[1] log  ZSET "time:seq" -> server time (µs); expires W after the
--              last admission
-- ARGV[1] limit per window
-- ARGV[2] window W in µs
-- ARGV[3] cost (units asked for, at most limit)
--
-- Returns {allowed 0|1, remaining, retry_after_us, reset_after_us}:
-- retry_after is when enough old units leave the window for this cost,
-- reset_after when the log is empty. A denied call changes nothing but
-- the purge of units that left the window.
local now = now_us()
local limit, win, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", string.format("%d", now - win))
local count = redis.call("ZCARD", KEYS[1])
if count + cost > limit then
  local i = count + cost - limit - 1
  local e = redis.call("ZRANGE", KEYS[1], i, i, "WITHSCORES")
  local last = redis.call("ZRANGE", KEYS[1], -1, -1, "WITHSCORES")
  return {0, limit - count, tonumber(e[2]) + win - now, tonumber(last[2]) + win - now}
end
for k = 1, cost do
  redis.call("ZADD", KEYS[1], string.format("%d", now), string.format("%d:%d", now, count + k))
end
redis.call("PEXPIRE", KEYS[1], math.ceil(win / 1000))
return {1, limit - count - cost, 0, win}
