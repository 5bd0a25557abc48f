-- registry.lua: register, change or remove a queue in one shard's
-- registry.
--
-- KEYS[1] queues   HASH  queue -> policy "max_retries|timeout_ms|max_payload|
--                        backoff_base_ms|backoff_cap_ms|backoff_factor"; a
--                        removed queue's policy is "drain|" .. policy
-- ARGV[1] "set", "remove" or "intern"
-- ARGV[2] queue name (set, remove); the encoding asked for (intern):
--         "auto", "1" or "2"
-- ARGV[3] policy (set); intern: what the shards' registries say, shard
--         0's included (Store.namesInShards): "new" when none exists, "2"
--         when one has an interned number in use, else "1"
-- ARGV[4] set: optional, the queue's interned number (written with its
--         name, as "|q|<number>" and "|id|<queue>"); intern: k, the
--         number of numbers the other shards name; then
--         k pairs (number, queue name); then the queue names to intern
--
-- intern (on shard 0's queues hash only) settles the namespace's task
-- encoding (field "|encoding"): "1" or "2" as asked, or for "auto" the
-- one recorded, else ARGV[3]'s ("2" for "new"): a namespace registered
-- for the first time writes version 2, one registered by a version that
-- wrote only version 1 stays on it. The numbers other shards name are
-- adopted first, so that a shard 0 that lost its hash gives every queue
-- its number again; a number shard 0 gives to another queue fails the
-- call ("registry: queue number conflict"), nothing written. For "2"
-- it gives each queue its interned number, once and for good (fields
-- "|num|<queue>" and "|q|<number>", "|ids" the last number given) and
-- returns {"2", number of each queue, ...}: "" for a queue past the
-- 65535th, which stays on version 1. For "1" it returns {"1"}. The
-- caller writes the numbers into every shard (Store.RegisterQueues).
--
-- set stores the policy (a removed queue becomes active again) and
-- returns 1 when the queue was new or removed, 0 when it was changed.
-- remove marks the queue removed: enqueue.lua then refuses it, and the
-- shard owner's recovery pass deletes the field once the queue's tasks in
-- the shard are gone. It returns 1 when marked, 0 when not registered, 2
-- when already removed.
if ARGV[1] == "intern" then
  local k = tonumber(ARGV[4]) or 0
  for i = 5, 4 + 2 * k, 2 do
    local n, q = ARGV[i], ARGV[i + 1]
    local has_q, has_n = redis.call("HGET", KEYS[1], "|q|" .. n), redis.call("HGET", KEYS[1], "|num|" .. q)
    if (has_q and has_q ~= q) or (has_n and has_n ~= n) then
      return redis.error_reply("registry: queue number conflict: " .. q .. " is number " .. n ..
        " in a shard, but shard 0 has " .. (has_n or "none") .. " for it and " .. (has_q or "none") .. " for " .. n)
    end
  end
  local enc = redis.call("HGET", KEYS[1], "|encoding")
  if ARGV[2] == "1" or ARGV[2] == "2" then
    enc = ARGV[2]
  elseif ARGV[2] ~= "auto" then
    return redis.error_reply("registry: unknown encoding " .. ARGV[2])
  elseif not enc then
    enc = ARGV[3] == "1" and "1" or "2"
  end
  redis.call("HSET", KEYS[1], "|encoding", enc)
  local last = tonumber(redis.call("HGET", KEYS[1], "|ids") or "0") or 0
  for i = 5, 4 + 2 * k, 2 do
    local n, q = ARGV[i], ARGV[i + 1]
    redis.call("HSET", KEYS[1], "|num|" .. q, n, "|q|" .. n, q)
    if tonumber(n) > last then last = tonumber(n) end
  end
  if k > 0 then redis.call("HSET", KEYS[1], "|ids", string.format("%d", last)) end
  if enc ~= "2" then return {"1"} end
  local out = {"2"}
  for i = 5 + 2 * k, #ARGV do
    local n = redis.call("HGET", KEYS[1], "|num|" .. ARGV[i])
    if not n and last < 65535 then
      last = redis.call("HINCRBY", KEYS[1], "|ids", 1)
      n = string.format("%d", last)
      redis.call("HSET", KEYS[1], "|num|" .. ARGV[i], n, "|q|" .. n, ARGV[i])
    end
    out[#out + 1] = n or ""
  end
  return out
end
local cur = redis.call("HGET", KEYS[1], ARGV[2])
if ARGV[1] == "set" then
  redis.call("HSET", KEYS[1], ARGV[2], ARGV[3])
  if ARGV[4] then -- its interned number: enqueues write version 2
    redis.call("HSET", KEYS[1], "|q|" .. ARGV[4], ARGV[2], "|id|" .. ARGV[2], ARGV[4])
  end
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
