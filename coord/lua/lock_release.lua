-- lock_release.lua: compare-and-delete a lock (or a read-write lock's
-- writer) and wake its waiters.
--
-- KEYS[1] lock   STRING owner token
-- ARGV[1] owner token of the caller
-- ARGV[2] wake channel (pub/sub)
-- ARGV[3] wake message: "1" wakes one waiter per process, "*" all
--
-- Returns 1 when released, 0 when the caller does not hold the lock
-- (expired, already released, or held by another owner): nothing changes.
if redis.call("GET", KEYS[1]) == ARGV[1] then
  redis.call("DEL", KEYS[1])
  redis.call("PUBLISH", ARGV[2], ARGV[3])
  return 1
end
return 0
