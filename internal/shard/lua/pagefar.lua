-- pagefar.lua: one page of a shard's far tier (tasks due far ahead, kept
-- in time buckets; see enqueue.lua), read-only, for listings. Bounded:
-- at most LIMIT entries and LIMIT buckets are examined.
--
-- Task data of encoding version 2 names its queue by number: the script
-- reads the name from the shard's queues hash ({tag}:queues, not
-- declared, in the shard's slot; lib.lua's queue_name), and fails with
-- "TRYAGAIN ...", nothing written, while that hash is not on the node.
--
-- KEYS[1] far      ZSET  bucket start ms -> promotion ms; bucket b's entries
--                        "id|enqueued_ms" are in the LIST KEYS[1] .. ":" .. b
-- KEYS[2] tasks    HASH  task id -> encoded task
-- KEYS[3] errors   HASH  task id -> last error
-- ARGV[1] cursor: promotion ms of the bucket to continue, "" for the first page
-- ARGV[2] cursor: that bucket's start (its member)
-- ARGV[3] cursor: index of the next entry in that bucket
-- ARGV[4] LIMIT (1..1000)
-- ARGV[5] queue filter, "" for every queue
-- ARGV[6] payload bytes shown per task at most (lib.lua's preview)
--
-- Returns {next_score, next_bucket, next_index, done, then per live
-- matching task: id, encoded task with at most ARGV[6] bytes of payload,
-- the payload's whole length (-1: in neither encoding), last error or ""}.
-- Task data is read one task at a time. An entry whose task
-- is gone or was enqueued anew (another enqueued_ms) is stale, not listed.
-- The bucket lists are not declared: before reading one the script checks
-- that this node serves it (lib.lua's served_here), and fails with
-- "TRYAGAIN ..." while the shard's slot is being migrated and the list is
-- not on this node (a list not moved yet would read as empty there).
local qn = queue_names(KEYS[2])
local limit = tonumber(ARGV[4])
local rank, idx = 0, 0
if ARGV[1] ~= "" then
  local r = redis.call("ZRANK", KEYS[1], ARGV[2])
  if r then
    rank, idx = r, tonumber(ARGV[3])
  else -- promoted meanwhile: continue with the next bucket
    rank = redis.call("ZCOUNT", KEYS[1], "-inf", "(" .. ARGV[1])
  end
end
local out = {"", "", 0, 0}
local examined, buckets = 0, 0
local score, bucket = ARGV[1], ARGV[2]
while examined < limit and buckets < limit do
  local b = redis.call("ZRANGE", KEYS[1], rank, rank, "WITHSCORES")
  if not b[1] then
    out[4] = 1
    break
  end
  buckets = buckets + 1
  score, bucket = b[2], b[1]
  local room = limit - examined
  local moving = served_here(KEYS[1], {KEYS[1] .. ":" .. bucket})
  if moving then return moving end
  local entries = redis.call("LRANGE", KEYS[1] .. ":" .. bucket, idx, idx + room - 1)
  examined = examined + #entries
  local ids, enqs = {}, {}
  for i, e in ipairs(entries) do
    local id, enq = string.match(e, "^(.+)|(%d+)$")
    ids[i], enqs[i] = id or "", enq or ""
  end
  if #ids > 0 then
    local errs = redis.call("HMGET", KEYS[3], unpack(ids))
    for i, id in ipairs(ids) do
      local blob = id ~= "" and redis.call("HGET", KEYS[2], id)
      local q, _, _, _, _, enq = header(blob, qn)
      if blob and (enq == nil or enq == enqs[i]) and (ARGV[5] == "" or q == ARGV[5]) then
        local data, size = preview(blob, tonumber(ARGV[6]))
        out[#out + 1] = id
        out[#out + 1] = data
        out[#out + 1] = size
        out[#out + 1] = errs[i] or ""
      end
    end
  end
  if #entries < room then
    rank, idx = rank + 1, 0
  else
    idx = idx + #entries
  end
end
out[1], out[2], out[3] = score, bucket, idx
-- The next call starts at rank with idx: name that bucket in the cursor.
if out[4] == 0 and idx == 0 then
  local b = redis.call("ZRANGE", KEYS[1], rank, rank, "WITHSCORES")
  if b[1] then
    out[1], out[2] = b[2], b[1]
  else
    out[4] = 1
  end
end
return out
