-- zset_refresh.lua: set a new expiry for one live member of an expiry
-- ZSET (a semaphore permit or a read-write lock's reader).
--
-- KEYS[1] holders ZSET id -> expiry (server ms)
-- ARGV[1] id
-- ARGV[2] new lease in ms, counted from now (server clock)
--
-- Returns 1 when refreshed, 0 when the id is not a member, -1 when it had
-- expired (it is removed now; an expired permit is never revived).
local now = now_ms()
local score = redis.call("ZSCORE", KEYS[1], ARGV[1])
if not score then
  return 0
end
if tonumber(score) <= now then
  redis.call("ZREM", KEYS[1], ARGV[1])
  return -1
end
redis.call("ZADD", KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
expire_at_last(KEYS[1])
return 1
