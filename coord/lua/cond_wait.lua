-- cond_wait.lua: start waiting on a condition: register the waiter and
-- release the lock, atomically (a Signal sent after the release finds
-- the waiter).
--
-- KEYS[1] lock   STRING owner token (the condition's lock)
-- KEYS[2] q      ZSET   waiter -> arrival number
-- KEYS[3] alive  ZSET   waiter -> liveness deadline (ms)
-- KEYS[4] sig    HASH   waiter -> "<kind>|<deadline ms>"
-- KEYS[5] seq    STRING arrival counter
-- ARGV[1] owner token of the caller's lease
-- ARGV[2] waiter id (random, unique to this Wait)
-- ARGV[3] liveness (ms): the waiter refreshes it every third of it
-- ARGV[4] the lock's wake channel (its waiters are woken: "1")
-- ARGV[5] the condition's wake channel (payload: a waiter id)
--
-- Returns 1 when the waiter waits and the lock is released, 0 when the
-- caller does not hold the lock (nothing changes).
if redis.call("GET", KEYS[1]) ~= ARGV[1] then
  return 0
end
local now, live = now_ms(), tonumber(ARGV[3])
cond_reroute(KEYS[2], KEYS[3], KEYS[4], ARGV[5], now, live)
redis.call("ZADD", KEYS[2], redis.call("INCR", KEYS[5]), ARGV[2])
redis.call("ZADD", KEYS[3], now + live, ARGV[2])
cond_expire(2, 3 * live)
redis.call("DEL", KEYS[1])
redis.call("PUBLISH", ARGV[4], "1")
return 1
