-- cond_check.lua: a waiter's heartbeat, and its end.
--
-- KEYS[1] q      ZSET   waiter -> arrival number
-- KEYS[2] alive  ZSET   waiter -> liveness deadline (ms)
-- KEYS[3] sig    HASH   waiter -> "<kind>|<deadline ms>"
-- KEYS[4] seq    STRING arrival counter
-- ARGV[1] waiter id
-- ARGV[2] liveness (ms)
-- ARGV[3] "stay": take a wake-up if one came, else refresh the waiter's
--         liveness (a waiter dropped as dead while it was paused waits
--         again, last in line); "leave": the wait timed out: take a
--         wake-up that came meanwhile, else stop waiting; "give": the
--         waiter gives up (its ctx ended): stop waiting and pass a
--         Signal's wake-up that came meanwhile to the oldest live waiter
-- ARGV[4] the condition's wake channel
--
-- Every call also passes on the wake-ups that dead waiters did not take.
-- Returns the kind of the wake-up the waiter took ("1": a Signal's, "*":
-- a Broadcast's; "stay", "leave"), else "" ("give" takes none).
local w, live, op = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local now = now_ms()
local function take()
  local s = redis.call("HGET", KEYS[3], w)
  if s then redis.call("HDEL", KEYS[3], w) end
  return s
end
local s = op == "stay" and take()
if s then
  cond_expire(1, 3 * live)
  return string.sub(s, 1, 1)
end
if op == "stay" then
  if redis.call("ZSCORE", KEYS[1], w) then
    redis.call("ZADD", KEYS[2], now + live, w)
  else
    redis.call("ZADD", KEYS[1], redis.call("INCR", KEYS[4]), w)
    redis.call("ZADD", KEYS[2], now + live, w)
  end
else
  redis.call("ZREM", KEYS[1], w)
  redis.call("ZREM", KEYS[2], w)
end
cond_reroute(KEYS[1], KEYS[2], KEYS[3], ARGV[4], now, live)
s = take()
local kind = s and string.sub(s, 1, 1) or ""
if op == "give" then
  if kind == "1" then
    local next = cond_next_live(KEYS[1], KEYS[2], now)
    if next then cond_deliver(KEYS[1], KEYS[2], KEYS[3], ARGV[4], next, "1", now, live) end
  end
  kind = ""
end
-- Last: a hand-on above may have made the sig hash anew.
cond_expire(1, 3 * live)
return kind
