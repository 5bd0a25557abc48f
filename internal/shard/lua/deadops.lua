-- deadops.lua: replay or purge dead letters of one shard: one by id, or
-- those matching a filter, a bounded page at a time.
--
-- Task data of encoding version 2 names its queue by number: the script
-- reads the name from the shard's queues hash ({tag}:queues, not
-- declared, in the shard's slot; lib.lua's queue_name), and fails with
-- "TRYAGAIN ...", nothing written, while that hash is not on the node.
--
-- KEYS[1] dead       ZSET  task id -> time buried
-- KEYS[2] dead info  HASH  task id -> JSON {reason, error, at}
-- KEYS[3] tasks      HASH  task id -> encoded task
-- KEYS[4] errors     HASH  task id -> last error
-- KEYS[5] delayed    ZSET  task id -> due ms
-- KEYS[6] counts     HASH  task counts (see lib.lua's count)
-- ARGV[1] "replay" or "purge"
-- ARGV[2] wake channel of the shard (replay)
-- ARGV[3] replay due time, unix ms, or "" for now
-- ARGV[4] task id, or "" to act on the page ARGV[5..] selects
-- ARGV[5] cursor score, "" for the first page; ARGV[6] cursor member
-- ARGV[7] LIMIT, dead letters examined at most (1..1000)
-- ARGV[8] queue filter ("" any); ARGV[9] lowest burial ms ("-inf");
-- ARGV[10] highest burial ms ("+inf"); ARGV[11] reason ("" any);
-- ARGV[12] last-error substring ("" any)
--
-- Replay puts a task back in the delayed set due at ARGV[3] with its
-- attempts reset to 0, and drops its dead-letter record and last error.
-- Data that cannot be decoded cannot be replayed: the entry is left and
-- counted as skipped. Purge deletes the entry with its data, so the id can
-- be enqueued again.
--
-- Returns {examined, acted, skipped, next_score, next_member, done}; for
-- one id {1, 1, 0, "", "", 1} when done, {0, 0, 0, "", "", 1} when the id
-- is not dead, {1, 0, 1, "", "", 1} when it cannot be replayed.
local qn = queue_names(KEYS[3])
local now = now_ms()
local due = tonumber(ARGV[3]) or now
local acted, skipped, earliest = 0, 0, nil

local function act(id, blob)
  local queue = blob_queue(blob, qn)
  if ARGV[1] == "replay" then
    local task = decode(blob, qn)
    if not task then
      skipped = skipped + 1
      return
    end
    task.attempts, task.due = 0, due
    redis.call("HSET", KEYS[3], id, encode(task, blob))
    redis.call("ZADD", KEYS[5], string.format("%d", due), id)
    count(KEYS[6], "s", queue, 1)
    if earliest == nil or due < earliest then earliest = due end
  else
    redis.call("HDEL", KEYS[3], id)
  end
  redis.call("ZREM", KEYS[1], id)
  redis.call("HDEL", KEYS[2], id)
  redis.call("HDEL", KEYS[4], id)
  count(KEYS[6], "d", queue, -1)
  acted = acted + 1
end

local function wake()
  if earliest == nil then return end
  local e = string.format("%d", earliest)
  if redis.call("ZCOUNT", KEYS[5], "-inf", "(" .. e) == 0 then
    redis.call("SPUBLISH", ARGV[2], e)
  end
end

if ARGV[4] ~= "" then
  if not redis.call("ZSCORE", KEYS[1], ARGV[4]) then return {0, 0, 0, "", "", 1} end
  act(ARGV[4], redis.call("HGET", KEYS[3], ARGV[4]) or nil)
  wake()
  return {1, acted, skipped, "", "", 1}
end

local start, anchored = page_start(KEYS[1], ARGV[5], ARGV[6], ARGV[9])
local ids, _, ns, nm, done = page_rows(KEYS[1], start, anchored, ARGV[5], ARGV[6], tonumber(ARGV[7]), ARGV[10])
if #ids > 0 then
  local blobs = redis.call("HMGET", KEYS[3], unpack(ids))
  local infos = redis.call("HMGET", KEYS[2], unpack(ids))
  for i, id in ipairs(ids) do
    if dead_match(blobs[i] or nil, infos[i] or nil, ARGV[8], ARGV[11], ARGV[12], qn) then
      act(id, blobs[i] or nil)
    end
  end
end
wake()
return {#ids, acted, skipped, ns, nm, done and 1 or 0}
