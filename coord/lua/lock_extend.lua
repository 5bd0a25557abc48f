-- lock_extend.lua: compare-and-pexpire a lock (or a read-write lock's
-- writer).
--
-- KEYS[1] lock   STRING owner token
-- ARGV[1] owner token of the caller
-- ARGV[2] new lease in ms, counted from now (server clock)
--
-- Returns 1 when extended, 0 when the caller does not hold the lock
-- (expired, released, or held by another owner): nothing changes.
if redis.call("GET", KEYS[1]) == ARGV[1] then
  redis.call("PEXPIRE", KEYS[1], ARGV[2])
  return 1
end
return 0
