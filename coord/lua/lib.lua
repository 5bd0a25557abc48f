-- lib.lua: helpers prepended to every coord script. It defines functions
-- only and touches no key by itself. Every script reads the time here,
-- from the Redis server, never from the caller.

-- now_us returns Redis server time in unix microseconds (exact in a Lua
-- number: about 1.8e15, below 2^53).
local function now_us()
  local t = redis.call("TIME")
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- now_ms returns Redis server time in unix milliseconds.
local function now_ms()
  return math.floor(now_us() / 1000)
end

-- expire_at_last sets the expiry of a ZSET scored by expiry time (ms) to
-- its highest score, so that a set whose members have all expired
-- disappears by itself.
local function expire_at_last(key)
  local last = redis.call("ZRANGE", key, -1, -1, "WITHSCORES")
  if last[2] then
    redis.call("PEXPIREAT", key, last[2])
  end
end

-- Condition variables (cond_*.lua). A condition's keys, in this order in
-- each cond script's KEYS: q (ZSET waiter -> arrival number: the waiters,
-- oldest first), alive (ZSET waiter -> liveness deadline, ms), sig (HASH
-- waiter -> "<kind>|<deadline ms>": a wake-up the waiter has not taken
-- yet; kind "1" for Signal, "*" for Broadcast), seq (STRING: the arrival
-- counter).

-- cond_next_live returns the oldest waiter of q whose liveness deadline
-- is not past, dropping the dead waiters it meets on the way; nil when
-- none is left.
local function cond_next_live(q, alive, now)
  while true do
    local first = redis.call("ZRANGE", q, 0, 0)[1]
    if not first then return nil end
    local d = tonumber(redis.call("ZSCORE", alive, first))
    if d and d >= now then return first end
    redis.call("ZREM", q, first)
    redis.call("ZREM", alive, first)
  end
end

-- cond_deliver wakes waiter w: it leaves q and alive, its wake-up of kind
-- ("1" or "*") waits in sig until it takes it, at the latest by now +
-- live, and its id is published on channel.
local function cond_deliver(q, alive, sig, channel, w, kind, now, live)
  redis.call("ZREM", q, w)
  redis.call("ZREM", alive, w)
  redis.call("HSET", sig, w, kind .. "|" .. string.format("%d", now + live))
  redis.call("PUBLISH", channel, w)
end

-- cond_reroute passes on the wake-ups their waiters did not take in time
-- (the waiter died): a Signal's goes to the oldest live waiter, a
-- Broadcast's is dropped (it was for that waiter only).
local function cond_reroute(q, alive, sig, channel, now, live)
  local all = redis.call("HGETALL", sig)
  for i = 1, #all, 2 do
    local kind, d = string.match(all[i + 1], "^(.)|(%d+)$")
    if not d or tonumber(d) < now then
      redis.call("HDEL", sig, all[i])
      local w = kind == "1" and cond_next_live(q, alive, now)
      if w then cond_deliver(q, alive, sig, channel, w, "1", now, live) end
    end
  end
end

-- cond_expire keeps the condition's keys (KEYS[from..from+3]) for ttl ms
-- more: live waiters refresh them every third of their liveness.
local function cond_expire(from, ttl)
  for i = from, from + 3 do
    redis.call("PEXPIRE", KEYS[i], ttl)
  end
end
