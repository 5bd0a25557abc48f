-- registry.lua: register, change or remove a queue in one shard's
-- registry.
--
-- KEYS[1] queues   HASH  queue -> policy "max_retries|timeout_ms|max_payload|
--                        backoff_base_ms|backoff_cap_ms|backoff_factor"; a
--                        removed queue's policy is "drain|" .. policy
-- ARGV[1] "set" or "remove"
-- ARGV[2] queue name
-- ARGV[3] policy (set)
--
-- set stores the policy (a removed queue becomes active again) and
-- returns 1 when the queue was new or removed, 0 when it was changed.
-- remove marks the queue removed: enqueue.lua then refuses it, and the
-- shard owner's recovery pass deletes the field once the queue's tasks in
-- the shard are gone. It returns 1 when marked, 0 when not registered, 2
-- when already removed.
local cur = redis.call("HGET", KEYS[1], ARGV[2])
if ARGV[1] == "set" then
  redis.call("HSET", KEYS[1], ARGV[2], ARGV[3])
  if not cur or string.sub(cur, 1, 6) == "drain|" then return 1 end
  return 0
end
if ARGV[1] ~= "remove" then
  return redis.error_reply("registry: unknown operation " .. ARGV[1])
end
if not cur then return 0 end
if string.sub(cur, 1, 6) == "drain|" then return 2 end
redis.call("HSET", KEYS[1], ARGV[2], "drain|" .. cur)
return 1
