-- fixed_window.lua: fixed-window counter. Windows are aligned on the
-- server clock: window i covers [i*W, (i+1)*W) ms since the unix epoch.
--
-- KEYS[1] counter  HASH w = current window index, n = units admitted in it;
--                  expires at the end of its window
-- ARGV[1] limit per window
-- ARGV[2] window W in ms
-- ARGV[3] cost (units asked for)
--
-- Returns {allowed 0|1, remaining, retry_after_ms, reset_after_ms}. A
-- denied call admits nothing and counts nothing.
local now = now_ms()
local limit, win, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local idx = math.floor(now / win)
local reset = (idx + 1) * win - now
local cur = redis.call("HMGET", KEYS[1], "w", "n")
local count = 0
if tonumber(cur[1]) == idx then
  count = tonumber(cur[2])
end
if count + cost > limit then
  return {0, limit - count, reset, reset}
end
count = count + cost
redis.call("HSET", KEYS[1], "w", string.format("%d", idx), "n", count)
redis.call("PEXPIREAT", KEYS[1], string.format("%d", (idx + 1) * win))
return {1, limit - count, 0, reset}
