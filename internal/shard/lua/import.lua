-- import.lua: store tasks exported from other shards (export.lua) in
-- this one, each as it was: due time, attempts, last error, dead record.
-- Second of the steps export -> import -> commit (docs/resharding.md).
-- Idempotent: an id already imported in this change (KEYS[9]) is skipped,
-- so an owner that resumes a batch after a crash cannot store a task
-- twice, even one that ran and finished here meanwhile. A dead letter
-- without data (empty data in its entry) is stored as one unless its id
-- has a task or a dead letter here: it must not make that task look dead.
--
-- Task data of encoding version 2 names its queue by number: the script
-- reads the name from the shard's queues hash ({tag}:queues, not
-- declared, in the shard's slot; lib.lua's queue_name), and fails with
-- "TRYAGAIN ...", nothing written, while that hash is not on the node.
--
-- KEYS[1] delayed    ZSET  task id -> due ms
-- KEYS[2] tasks      HASH  task id -> encoded task
-- KEYS[3] queues     HASH  queue policies; field "|far" is the far tier's
--                          "bucket_ms|lead_ms" (enqueue.lua)
-- KEYS[4] far        ZSET  far-tier buckets (enqueue.lua); the bucket
--                          lists KEYS[4] .. ":" .. start are not declared
--                          (checked with lib.lua's served_here)
-- KEYS[5] counts     HASH  task counts (lib.lua's count)
-- KEYS[6] dead       ZSET  task id -> time buried
-- KEYS[7] dead info  HASH  task id -> JSON burial record
-- KEYS[8] errors     HASH  task id -> last error
-- KEYS[9] imported   SET   ids imported during this change; it expires a
--                          day after the last import
-- KEYS[10] marker    STRING the shard's layout marker "gen|shards|from"
-- ARGV[1] this shard's wake channel (the owner is woken when an imported
--         task is the new earliest)
-- ARGV[2] the marker of the change the caller migrates for: another value
--         (a later change began, which may have dropped this shard)
--         refuses the call
-- ARGV[3..] pairs: task id, its outbox entry as export.lua packed it
--
-- Returns {imported, skipped}, or {-11, 0} when the marker is not ARGV[2]
-- (nothing written).
local qn = queue_names(KEYS[2])
if redis.call("GET", KEYS[10]) ~= ARGV[2] then return {-11, 0} end
local now = now_ms()
local far = nil
do
  local b, l = string.match(redis.call("HGET", KEYS[3], "|far") or "", "^(%d+)|(%d+)$")
  if b and tonumber(b) > 0 then far = {bucket = tonumber(b), lead = tonumber(l)} end
end

-- Where each task goes, and the far-tier lists to check first.
local plan, lists, seen = {}, {}, {}
for i = 3, #ARGV, 2 do
  local id = ARGV[i]
  local e = cmsgpack.unpack(ARGV[i + 1])
  local p = {id = id, kind = e[1], score = tonumber(e[2]), blob = e[3], info = e[4], last = e[5]}
  local t = decode(p.blob, qn)
  p.queue = blob_queue(p.blob, qn)
  if p.kind == "f" or p.kind == "d" then
    p.due = t and t.due or now
    if far and t and p.due - now > 1000 then
      local b = p.due - p.due % far.bucket
      if b - far.lead > now then
        p.bucket = string.format("%d", b)
        p.enq = string.format("%d", t.enqueued)
        local key = KEYS[4] .. ":" .. p.bucket
        if not seen[key] then
          seen[key] = true
          lists[#lists + 1] = key
        end
      end
    end
  end
  plan[#plan + 1] = p
end
local moving = served_here(KEYS[1], lists)
if moving then return moving end

local imported, skipped, earliest = 0, 0, nil
for _, p in ipairs(plan) do
  local fresh = redis.call("SADD", KEYS[9], p.id) == 1
  if fresh and p.blob == "" then
    fresh = redis.call("HEXISTS", KEYS[2], p.id) == 0 and not redis.call("ZSCORE", KEYS[6], p.id)
  elseif fresh then
    fresh = redis.call("HSETNX", KEYS[2], p.id, p.blob) == 1
  end
  if not fresh then
    skipped = skipped + 1
  else
    imported = imported + 1
    if p.last ~= "" then redis.call("HSET", KEYS[8], p.id, p.last) end
    if p.kind == "x" then
      redis.call("ZADD", KEYS[6], string.format("%d", p.score), p.id)
      if p.info ~= "" then redis.call("HSET", KEYS[7], p.id, p.info) end
      count(KEYS[5], "d", p.queue, 1)
    else
      count(KEYS[5], "s", p.queue, 1)
      local at
      if p.bucket then
        at = tonumber(p.bucket) - far.lead
        redis.call("ZADD", KEYS[4], "NX", string.format("%d", at), p.bucket)
        redis.call("RPUSH", KEYS[4] .. ":" .. p.bucket, p.id .. "|" .. p.enq)
        redis.call("ZADD", KEYS[1], "LT", string.format("%d", at), "|far")
      else
        at = p.due
        redis.call("ZADD", KEYS[1], string.format("%d", at), p.id)
      end
      if earliest == nil or at < earliest then earliest = at end
    end
  end
end
redis.call("EXPIRE", KEYS[9], 86400)
if earliest ~= nil then
  local e = string.format("%d", earliest)
  if redis.call("ZCOUNT", KEYS[1], "-inf", "(" .. e) == 0 then
    redis.call("SPUBLISH", ARGV[1], e)
  end
end
return {imported, skipped}
