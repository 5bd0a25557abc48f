-- zset_release.lua: remove one member of an expiry ZSET (a semaphore
-- permit or a read-write lock's reader) and wake waiters.
--
-- KEYS[1] holders ZSET id -> expiry (server ms)
-- ARGV[1] id
-- ARGV[2] wake channel (pub/sub)
-- ARGV[3] wake message: "1" wakes one waiter per process, "*" all
-- ARGV[4] "always" to publish on every release, "last" to publish only
--         when no live member is left
--
-- Returns 1 when released, 0 when the id is not a member (never was,
-- released, or purged after expiry), -1 when it had expired (it is
-- removed now, nobody is woken: waiters wake at expiries by themselves).
local now = now_ms()
local score = redis.call("ZSCORE", KEYS[1], ARGV[1])
if not score then
  return 0
end
redis.call("ZREM", KEYS[1], ARGV[1])
if tonumber(score) <= now then
  return -1
end
if ARGV[4] == "always" or redis.call("ZCOUNT", KEYS[1], "(" .. now, "+inf") == 0 then
  redis.call("PUBLISH", ARGV[2], ARGV[3])
end
return 1
