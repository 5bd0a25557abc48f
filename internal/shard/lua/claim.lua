-- claim.lua: lease ids a worker popped from one ready list.
--
-- KEYS[1] tasks      HASH  task id -> encoded task
-- KEYS[2] inflight   ZSET  task id -> lease deadline ms
-- KEYS[3] leases     HASH  task id -> delivery token
-- KEYS[4] seq        STRING sequence counter (tokens come from it)
-- KEYS[5] pending    ZSET  task id -> sequence, of the popped list's queue
-- KEYS[6] dead       ZSET  task id -> time buried
-- KEYS[7] dead info  HASH  task id -> JSON
-- ARGV[1] lease in ms, or "" for each task's own timeout
-- ARGV[2..n] popped ready-list entries, "seq|id"
--
-- An entry is leased only if its id is pending under the entry's sequence
-- number: a leftover duplicate entry (a re-delivery) or a cancelled task is
-- skipped. Undecodable data is buried. Returns {now, id_1, token_1,
-- deadline_1, blob_1, id_2, ...} for the leased ids only.
local now = now_ms()
local out = {now}

-- Entries whose id is pending under their very number, each id once.
local ids, nums, seen = {}, {}, {}
for i = 2, #ARGV do
  local seq, id = ready_entry(ARGV[i])
  if id and not seen[id] then
    seen[id] = true
    ids[#ids + 1] = id
    nums[#nums + 1] = seq
  end
end
if #ids == 0 then return out end
local live = {}
for i = 1, #ids, 1000 do
  local scores = redis.call("ZMSCORE", KEYS[5], unpack(ids, i, math.min(i + 999, #ids)))
  for j, sc in ipairs(scores) do
    local k = i + j - 1
    if sc and tonumber(sc) == nums[k] then live[#live + 1] = ids[k] end
  end
end
if #live == 0 then return out end
bulk("ZREM", KEYS[5], live)

local blobs = {}
for i = 1, #live, 1000 do
  for _, b in ipairs(redis.call("HMGET", KEYS[1], unpack(live, i, math.min(i + 999, #live)))) do
    blobs[#blobs + 1] = b
  end
end
local leased, deadlines, tokens = {}, {}, {}
local first = nil
for i, id in ipairs(live) do
  local task, why = decode(blobs[i] or nil)
  if task then
    if not first then
      first = redis.call("INCRBY", KEYS[4], #live) - #live -- tokens for the batch
    end
    first = first + 1
    local token = string.format("%d", first)
    local deadline = now + (tonumber(ARGV[1]) or task.timeout)
    deadlines[#deadlines + 1] = string.format("%d", deadline)
    deadlines[#deadlines + 1] = id
    tokens[#tokens + 1] = id
    tokens[#tokens + 1] = token
    out[#out + 1] = id
    out[#out + 1] = token
    out[#out + 1] = deadline
    out[#out + 1] = blobs[i]
  else
    bury(KEYS[6], KEYS[7], id, now, why, "")
  end
end
if #deadlines > 0 then
  bulk("ZADD", KEYS[2], deadlines)
  bulk("HSET", KEYS[3], tokens)
end
return out
