-- lock_acquire.lua: take a lock if it is free.
--
-- KEYS[1] lock   STRING owner token; its expiry (PX, server clock) is the lease
-- KEYS[2] fence  STRING fencing counter (INCR); never expires; touched
--                only when ARGV[3] is "1"
-- ARGV[1] owner token (random, unique per acquisition)
-- ARGV[2] lease in ms
-- ARGV[3] "1" to draw a fencing token, "0" not to
--
-- Returns {1, fence} when taken (fence is 0 without fencing), or
-- {0, pttl}: the holder's remaining ms (-1 if the key has no expiry),
-- after which the lock is free even if nobody releases it.
if redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
  local fence = 0
  if ARGV[3] == "1" then
    fence = redis.call("INCR", KEYS[2])
  end
  return {1, fence}
end
return {0, redis.call("PTTL", KEYS[1])}
