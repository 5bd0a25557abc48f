-- enqueue.lua: store tasks of one shard and schedule them.
--
-- This script is the enqueue protocol: a producer in any language can call
-- it with EVAL/EVALSHA (or `redis-cli --eval`). It needs nothing else. One
-- call takes any number of tasks of the same shard; each gets its own
-- result.
--
-- KEYS[1] delayed  ZSET  task id -> due time (unix ms)
-- KEYS[2] tasks    HASH  task id -> encoded task (see docs/protocol.md)
-- KEYS[3] queues   HASH  queue name -> policy, "max_retries|timeout_ms|max_payload|..."
--                        (further fields are for retries; see docs/protocol.md);
--                        field "|far" = "bucket_ms|lead_ms" turns the far tier on
-- KEYS[4] far      ZSET  optional (without it every task goes to KEYS[1]):
--                        far-tier buckets, bucket start ms -> promotion time;
--                        bucket b's entries "id|enqueued_ms" are in the LIST
--                        KEYS[4] .. ":" .. b. A task due in bucket b (its due
--                        time rounded down to bucket_ms) goes there when
--                        b - lead_ms is still in the future; the member "|far"
--                        of KEYS[1] is then scored by the earliest promotion.
-- ARGV[1] wake channel of this shard: when a call makes a task the shard's
--         earliest, that due time is published there with SPUBLISH
-- then six arguments per task, for task i at ARGV[2+6(i-1)] onwards:
--   id          task id (1..256 bytes, no "|")
--   due         absolute unix ms ("1795338744244", at most 13 digits), or a
--               delay in ms after Redis server time ("+30000", at most 12)
--   queue       queue name (must be registered in KEYS[3])
--   max retries "" for the queue's default, else 0..1000
--   timeout ms  "" for the queue's default, else 1..9999999999
--   payload     opaque bytes
--
-- Returns, per task, three values {code, due_ms, detail}:
--   { 1, due, ""}            enqueued
--   { 0, due or -1, state}   duplicate: the id is live; nothing changed
--   {-1, 0, queue}           unknown queue
--   {-2, 0, max_payload}     payload larger than the queue allows
--   {-3, 0, message}         invalid argument
if (#ARGV - 1) % 6 ~= 0 or #ARGV < 7 then
  return redis.error_reply("enqueue: want a wake channel and 6 arguments per task")
end

local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_s = string.format("%d", now)
local head = redis.call("ZRANGE", KEYS[1], "0", "0", "WITHSCORES")
local head_due = tonumber(head[2])
local earliest = nil -- earliest due (or promotion) time this call stores
local policies = {}

-- The far tier: read once per call, and only for a task due more than a
-- second ahead. far_lists holds this call's entries per bucket.
local far -- nil: not read yet; false: off
local function far_tier()
  if far == nil then
    far = false
    if KEYS[4] then
      local b, l = string.match(redis.call("HGET", KEYS[3], "|far") or "", "^(%d+)|(%d+)$")
      if b and tonumber(b) > 0 then far = {bucket = tonumber(b), lead = tonumber(l)} end
    end
  end
  return far
end
local far_lists, far_order = {}, {}

local function enqueue(id, due_arg, queue, retries, timeout, payload)
  if id == "" or #id > 256 or string.find(id, "|", 1, true) then
    return -3, 0, "invalid task id"
  end
  local policy = policies[queue]
  if policy == nil then
    policy = redis.call("HGET", KEYS[3], queue) or false
    policies[queue] = policy
  end
  if not policy then
    return -1, 0, queue
  end
  local def_retries, def_timeout, max_payload = string.match(policy, "^(%d+)|(%d+)|(%d+)")
  if not max_payload then
    return -3, 0, "corrupt queue policy for " .. queue
  end
  if #payload > tonumber(max_payload) then
    return -2, 0, max_payload
  end
  -- Numbers are bounded so that they stay exact in Lua and in every reader.
  if retries == "" then retries = def_retries end
  if not string.match(retries, "^%d%d?%d?%d?$") or (#retries == 4 and tonumber(retries) > 1000) then
    return -3, 0, "invalid max retries (0..1000)"
  end
  if timeout == "" then timeout = def_timeout end
  if not string.match(timeout, "^%d+$") or #timeout > 10 or tonumber(timeout) < 1 then
    return -3, 0, "invalid timeout (1..9999999999 ms)"
  end
  local due
  if string.sub(due_arg, 1, 1) == "+" then
    local delay = string.match(due_arg, "^%+(%d+)$")
    if not delay or #delay > 12 then return -3, 0, "invalid delay (0..999999999999 ms)" end
    due = now + tonumber(delay)
  else
    if not string.match(due_arg, "^%d+$") or #due_arg > 13 then
      return -3, 0, "invalid due time (unix ms, at most 13 digits)"
    end
    due = tonumber(due_arg)
  end
  local due_s = string.format("%d", due)
  -- Encoded task, version 1:
  -- 1|queue|attempts|max_retries|timeout_ms|due_ms|enqueued_ms|payload
  -- HSETNX is the duplicate check and the write in one command.
  if redis.call("HSETNX", KEYS[2], id, "1|" .. queue .. "|0|" .. retries .. "|" ..
      timeout .. "|" .. due_s .. "|" .. now_s .. "|" .. payload) == 0 then
    local score = tonumber(redis.call("ZSCORE", KEYS[1], id))
    if not score then -- in the far tier, or ready, running or dead
      local d = tonumber(string.match(redis.call("HGET", KEYS[2], id), "^1|[^|]+|%d+|%d+|%d+|(%d+)|") or "")
      if d and d > now then score = d end
    end
    if score then return 0, score, "scheduled" end
    return 0, -1, "ready"
  end
  local wake = due
  local ft = due - now > 1000 and far_tier()
  local bucket = ft and due - due % ft.bucket
  if bucket and bucket - ft.lead > now then
    local b = string.format("%d", bucket)
    local l = far_lists[b]
    if not l then
      l = {}
      far_lists[b] = l
      far_order[#far_order + 1] = b
    end
    l[#l + 1] = id .. "|" .. now_s
    wake = bucket - ft.lead
  else
    redis.call("ZADD", KEYS[1], due_s, id)
  end
  if earliest == nil or wake < earliest then earliest = wake end
  return 1, due, ""
end

local out = {}
for i = 2, #ARGV, 6 do
  local code, due, detail = enqueue(ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5])
  out[#out + 1] = code
  out[#out + 1] = due
  out[#out + 1] = detail
end
for _, b in ipairs(far_order) do
  local promote = string.format("%d", tonumber(b) - far.lead)
  redis.call("ZADD", KEYS[4], "NX", promote, b)
  local l = far_lists[b]
  for i = 1, #l, 1000 do
    redis.call("RPUSH", KEYS[4] .. ":" .. b, unpack(l, i, math.min(i + 999, #l)))
  end
  redis.call("ZADD", KEYS[1], "LT", promote, "|far")
end
if earliest ~= nil and (head_due == nil or earliest < head_due) then
  redis.call("SPUBLISH", ARGV[1], string.format("%d", earliest))
end
return out
