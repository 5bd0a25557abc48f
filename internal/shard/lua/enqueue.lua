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
-- KEYS[5] counts   HASH  optional (needs KEYS[4]): the shard's task counts;
--                        field "s|<queue>" counts the queue's scheduled
--                        tasks (see docs/protocol.md). A producer that
--                        leaves it out makes those counts low.
-- ARGV[1] wake channel of this shard: when a call makes a task the shard's
--         earliest (or ties the earliest), that due time is published
--         there with SPUBLISH
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
--   {-1, 0, queue}           unknown queue, or a removed queue (its policy
--                            is "drain|..."; it takes no new tasks)
--   {-2, 0, max_payload}     payload larger than the queue allows
--   {-3, 0, message}         invalid argument
if (#ARGV - 1) % 6 ~= 0 or #ARGV < 7 then
  return redis.error_reply("enqueue: want a wake channel and 6 arguments per task")
end

local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_s = string.format("%d", now)
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
local stored = {} -- tasks stored by this call, per queue

local function enqueue(id, due_arg, queue, retries, timeout, payload)
  if id == "" or #id > 256 or string.find(id, "|", 1, true) then
    return -3, 0, "invalid task id"
  end
  local policy = policies[queue]
  if policy == nil then
    policy = redis.call("HGET", KEYS[3], queue) or false
    policies[queue] = policy
  end
  if not policy or string.sub(policy, 1, 6) == "drain|" then
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
  if #timeout > 10 or not string.match(timeout, "^0*[1-9]%d*$") then
    return -3, 0, "invalid timeout (1..9999999999 ms)"
  end
  local due, due_s
  if string.sub(due_arg, 1, 1) == "+" then
    local delay = string.match(due_arg, "^%+(%d+)$")
    if not delay or #delay > 12 then return -3, 0, "invalid delay (0..999999999999 ms)" end
    due = now + tonumber(delay)
    due_s = string.format("%d", due)
  else
    if #due_arg > 13 or not string.match(due_arg, "^%d+$") then
      return -3, 0, "invalid due time (unix ms, at most 13 digits)"
    end
    due, due_s = tonumber(due_arg), due_arg
  end
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
  stored[queue] = (stored[queue] or 0) + 1
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
  else
    redis.call("ZADD", KEYS[1], due_s, id)
    if earliest == nil or due < earliest then earliest = due end
  end
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
  local p = tonumber(b) - far.lead
  local promote = string.format("%d", p)
  redis.call("ZADD", KEYS[4], "NX", promote, b)
  local l = far_lists[b]
  for i = 1, #l, 1000 do
    redis.call("RPUSH", KEYS[4] .. ":" .. b, unpack(l, i, math.min(i + 999, #l)))
  end
  -- "|far" is a wake candidate only when this call moved it earlier.
  if redis.call("ZADD", KEYS[1], "LT", "CH", promote, "|far") == 1 then
    if earliest == nil or p < earliest then earliest = p end
  end
end
if KEYS[5] then
  for q, n in pairs(stored) do
    redis.call("HINCRBY", KEYS[5], "s|" .. q, n)
  end
end
-- Wake the owner when nothing in KEYS[1] is due before this call's
-- earliest member: it is the new head, or tied with the old one (a
-- needless wake-up, never a missed one). ZCOUNT answers with an integer;
-- reading the head's score would format a double and parse it back.
if earliest ~= nil then
  local e = string.format("%d", earliest)
  if redis.call("ZCOUNT", KEYS[1], "-inf", "(" .. e) == 0 then
    redis.call("SPUBLISH", ARGV[1], e)
  end
end
return out
