-- registry.lua: register, change or remove a queue in one shard's
-- registry.
--
-- KEYS[1] queues   HASH  queue -> policy "max_retries|timeout_ms|max_payload|
--                        backoff_base_ms|backoff_cap_ms|backoff_factor"; a
--                        removed queue's policy is "drain|" .. policy
-- ARGV[1] "set", "remove" or "intern"
-- ARGV[2] queue name (set, remove); the encoding asked for (intern):
--         "auto", "1" or "2"
-- ARGV[3] policy (set); intern: ARGV[3..] queue names
--
-- intern (on shard 0's queues hash only) settles the namespace's task
-- encoding (field "|encoding"): "1" or "2" as asked, or for "auto" the
-- one recorded, else "2" when the hash did not exist yet (a namespace
-- registered for the first time) and "1" when it did (registered by a
-- version that wrote only version 1). For "2" it gives each queue its
-- interned number, once and for good (fields "|num|<queue>" and
-- "|q|<number>", "|ids" the last number given, at most 65535) and
-- returns {"2", number of ARGV[3], ...}; for "1" it returns {"1"}. The
-- caller writes the numbers into every shard (Store.RegisterQueues).
--
-- set stores the policy (a removed queue becomes active again) and
-- returns 1 when the queue was new or removed, 0 when it was changed.
-- remove marks the queue removed: enqueue.lua then refuses it, and the
-- shard owner's recovery pass deletes the field once the queue's tasks in
-- the shard are gone. It returns 1 when marked, 0 when not registered, 2
-- when already removed.
if ARGV[1] == "intern" then
  local enc = redis.call("HGET", KEYS[1], "|encoding")
  if ARGV[2] == "1" or ARGV[2] == "2" then
    enc = ARGV[2]
  elseif ARGV[2] ~= "auto" then
    return redis.error_reply("registry: unknown encoding " .. ARGV[2])
  elseif not enc then
    enc = redis.call("EXISTS", KEYS[1]) == 0 and "2" or "1"
  end
  redis.call("HSET", KEYS[1], "|encoding", enc)
  if enc ~= "2" then return {"1"} end
  local out = {"2"}
  for i = 3, #ARGV do
    local n = redis.call("HGET", KEYS[1], "|num|" .. ARGV[i])
    if not n then
      local next_id = redis.call("HINCRBY", KEYS[1], "|ids", 1)
      if next_id > 65535 then
        return redis.error_reply("registry: more than 65535 queue names interned")
      end
      n = string.format("%d", next_id)
      redis.call("HSET", KEYS[1], "|num|" .. ARGV[i], n, "|q|" .. n, ARGV[i])
    end
    out[#out + 1] = n
  end
  return out
end
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
