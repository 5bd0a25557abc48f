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
