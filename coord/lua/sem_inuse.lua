-- sem_inuse.lua: count the live (unexpired) members of an expiry ZSET.
--
-- KEYS[1] permits ZSET id -> expiry (server ms)
--
-- Returns the number of members whose expiry is after now.
return redis.call("ZCOUNT", KEYS[1], "(" .. now_ms(), "+inf")
