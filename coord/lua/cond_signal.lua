-- cond_signal.lua: Signal (wake the oldest live waiter) or Broadcast
-- (wake every live waiter there is now).
--
-- KEYS[1] q      ZSET   waiter -> arrival number
-- KEYS[2] alive  ZSET   waiter -> liveness deadline (ms)
-- KEYS[3] sig    HASH   waiter -> "<kind>|<deadline ms>"
-- KEYS[4] seq    STRING arrival counter
-- ARGV[1] "one" (Signal) or "all" (Broadcast)
-- ARGV[2] liveness (ms)
-- ARGV[3] the condition's wake channel (payload: the waiter's id)
--
-- Returns the number of waiters woken (0 or 1 for "one").
local live = tonumber(ARGV[2])
local now = now_ms()
cond_reroute(KEYS[1], KEYS[2], KEYS[3], ARGV[3], now, live)
local n = 0
if ARGV[1] == "one" then
  local w = cond_next_live(KEYS[1], KEYS[2], now)
  if w then
    cond_deliver(KEYS[1], KEYS[2], KEYS[3], ARGV[3], w, "1", now, live)
    n = 1
  end
elseif ARGV[1] == "all" then
  for _, w in ipairs(redis.call("ZRANGE", KEYS[1], 0, -1)) do
    local d = tonumber(redis.call("ZSCORE", KEYS[2], w))
    if d and d >= now then
      cond_deliver(KEYS[1], KEYS[2], KEYS[3], ARGV[3], w, "*", now, live)
      n = n + 1
    else
      redis.call("ZREM", KEYS[1], w)
      redis.call("ZREM", KEYS[2], w)
    end
  end
else
  return redis.error_reply("cond_signal: unknown operation " .. ARGV[1])
end
if redis.call("EXISTS", KEYS[1], KEYS[3]) > 0 then cond_expire(1, 3 * live) end
return n
