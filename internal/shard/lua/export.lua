-- export.lua: take tasks out of a shard whose shard changes with the
-- shard count (docs/resharding.md, "Migration"), first of the three steps
-- export -> import (import.lua, on the new shard) -> commit (commit.lua,
-- here). Run by the shard's owner, fenced by its epoch.
--
-- Task data of encoding version 2 names its queue by number: the script
-- reads the name from the shard's queues hash ({tag}:queues, not
-- declared, in the shard's slot; lib.lua's queue_name), and fails with
-- "TRYAGAIN ...", nothing written, while that hash is not on the node.
--
-- A task that is scheduled (in the delayed set or the far tier) or dead
-- leaves its indexes and its data: its entry goes to the outbox, where
-- dedupe, cancel and lookup still find it until commit.lua drops it. A
-- task in flight (ready, popped, leased) or due within ARGV[2] ms stays:
-- it runs here, and is exported later if it comes back (a retry). A dead
-- letter without data (move.lua buries a delayed-set member whose data
-- is gone) leaves as a dead letter with empty data, its burial record
-- and last error kept.
--
-- KEYS[1] delayed    ZSET  task id -> due ms
-- KEYS[2] tasks      HASH  task id -> encoded task
-- KEYS[3] inflight   ZSET  task id -> lease deadline ms
-- KEYS[4] dead       ZSET  task id -> time buried
-- KEYS[5] dead info  HASH  task id -> JSON burial record
-- KEYS[6] errors     HASH  task id -> last error
-- KEYS[7] counts     HASH  task counts (lib.lua's count)
-- KEYS[8] outbox     HASH  task id -> cmsgpack {kind, score, blob, info,
--                          last error}; kind "d" delayed (score: due ms),
--                          "f" far tier, "x" dead (score: time buried)
-- KEYS[9] epoch      STRING fencing epoch of the shard's owner
-- KEYS[10] stats     HASH  counters (stale_epoch)
-- KEYS[11] marker    STRING the shard's layout marker "gen|shards|from"
-- ARGV[1] caller's epoch
-- ARGV[2] margin ms: a task due sooner than that stays
-- ARGV[3] pending key prefix of this shard (a queue name follows; not
--         declared: checked with lib.lua's served_here before any write)
-- ARGV[4] the marker of the change the caller migrates for: another
--         value (a later change began) refuses the call
-- ARGV[5..] task ids
--
-- Returns {code, outcome per id}: code 1; -10 when ARGV[1] is older than
-- the stored epoch; -11 when the marker is not ARGV[4] (nothing written
-- either way). Outcomes: the packed outbox entry of an exported task, ""
-- for an id without data that is no dead letter (gone), "s<why>|<queue>"
-- for a task that stays:
-- why is "l" leased, "r" ready or popped (pending), "m" due within the
-- margin.
local qn = queue_names(KEYS[2])
local ok, stored = fence(KEYS[9], KEYS[10], ARGV[1])
if not ok then return {-10, stored} end
if redis.call("GET", KEYS[11]) ~= ARGV[4] then return {-11, 0} end
local now = now_ms()
local margin = tonumber(ARGV[2])

local pending = {}
local blobs = {}
for i = 5, #ARGV do
  local blob = redis.call("HGET", KEYS[2], ARGV[i])
  blobs[i] = blob or false
  local q = blob and blob_queue(blob, qn)
  if q and q ~= "" then pending[#pending + 1] = ARGV[3] .. q end
end
local moving = served_here(KEYS[1], pending)
if moving then return moving end

local out = {1}
for i = 5, #ARGV do
  local id, blob = ARGV[i], blobs[i]
  local res = "sl"
  local q = blob and blob_queue(blob, qn) or ""
  if not blob then
    res = ""
    local buried = tonumber(redis.call("ZSCORE", KEYS[4], id))
    if buried then
      local info = redis.call("HGET", KEYS[5], id) or ""
      local last = redis.call("HGET", KEYS[6], id) or ""
      redis.call("ZREM", KEYS[4], id)
      redis.call("HDEL", KEYS[5], id)
      redis.call("HDEL", KEYS[6], id)
      count(KEYS[7], "d", "", -1)
      res = cmsgpack.pack({"x", buried, "", info, last})
      redis.call("HSET", KEYS[8], id, res)
    end
  elseif not redis.call("ZSCORE", KEYS[3], id) then
    res = "sr"
    local kind, score, info = nil, nil, nil
    local due = tonumber(redis.call("ZSCORE", KEYS[1], id))
    if due then
      if due >= now + margin then
        kind, score = "d", due
        redis.call("ZREM", KEYS[1], id)
      else
        res = "sm"
      end
    else
      local buried = tonumber(redis.call("ZSCORE", KEYS[4], id))
      if buried then
        kind, score = "x", buried
        info = redis.call("HGET", KEYS[5], id) or false
        redis.call("ZREM", KEYS[4], id)
        redis.call("HDEL", KEYS[5], id)
      elseif q == "" then
        -- Data that does not decode, in no set: the new shard's mover
        -- buries it with the reason.
        kind, score = "d", now + margin
      elseif not redis.call("ZSCORE", ARGV[3] .. q, id) then
        -- In no set and no pending set: in the far tier. Its bucket
        -- entry stays; the promotion drops it, the data being gone.
        -- Its due time is in its data: due within the margin, it stays
        -- as a task of the delayed set does.
        local t = decode(blob, qn)
        if not t or t.due >= now + margin then
          kind, score = "f", 0
        else
          res = "sm"
        end
      end
    end
    if kind then
      local last = redis.call("HGET", KEYS[6], id) or false
      redis.call("HDEL", KEYS[2], id)
      redis.call("HDEL", KEYS[6], id)
      count(KEYS[7], kind == "x" and "d" or "s", q, -1)
      res = cmsgpack.pack({kind, score, blob, info or "", last or ""})
      redis.call("HSET", KEYS[8], id, res)
    end
  end
  if res == "sl" or res == "sr" or res == "sm" then res = res .. "|" .. q end
  out[#out + 1] = res
end
return out
