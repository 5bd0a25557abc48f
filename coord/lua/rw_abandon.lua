-- rw_abandon.lua: remove a writer's "writer waiting" marker when it gives
-- up waiting, and wake the readers it kept out.
--
-- KEYS[1] waiting  ZSET waiting writer token -> marker expiry (server ms)
-- ARGV[1] writer token
-- ARGV[2] wake channel (pub/sub)
--
-- Returns 1 when a marker was removed, 0 when there was none.
if redis.call("ZREM", KEYS[1], ARGV[1]) == 1 then
  redis.call("PUBLISH", ARGV[2], "*")
  return 1
end
return 0
