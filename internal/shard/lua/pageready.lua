-- pageready.lua: one page of a queue's ready list in one shard,
-- read-only, for listings. Bounded: at most LIMIT entries are examined
-- (plus, when workers popped entries since the previous page, a binary
-- search of LINDEX calls to find where it ended).
--
-- KEYS[1] ready    LIST  entries "seq|id|task" (or "seq|id"), seq growing along it
-- KEYS[2] pending  ZSET  task id -> seq of its live entry
-- KEYS[3] tasks    HASH  task id -> encoded task (for entries without the task)
-- KEYS[4] errors   HASH  task id -> last error
-- ARGV[1] index of the next entry, "0" for the first page
-- ARGV[2] seq of the last entry examined, "" for the first page
-- ARGV[3] LIMIT (1..1000)
-- ARGV[4] payload bytes shown per task at most (lib.lua's preview)
--
-- Returns {next_index, last_seq, done, then per live entry: id, seq,
-- encoded task with at most ARGV[4] bytes of payload or "", the
-- payload's whole length (-1: no data, or in neither encoding), last error or
-- ""}. A leftover duplicate entry (its id is
-- pending under another number) is not listed.
local idx, last = tonumber(ARGV[1]), tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local function seq_at(i)
  local s = ready_entry(redis.call("LINDEX", KEYS[1], i))
  return s
end
if last and idx > 0 then
  local s = seq_at(idx - 1)
  if s ~= last then
    -- Entries left the head since: find the first entry numbered above
    -- last (numbers grow along the list) in [0, idx].
    local lo, hi = 0, idx
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      local ms = seq_at(mid)
      if ms and ms > last then hi = mid else lo = mid + 1 end
    end
    idx = lo
  end
end
local entries = redis.call("LRANGE", KEYS[1], idx, idx + limit - 1)
local out = {idx + #entries, ARGV[2], #entries < limit and 1 or 0}
local ids, seqs, blobs = {}, {}, {}
for _, e in ipairs(entries) do
  local seq, id, seq_s = ready_entry(e)
  if seq then
    out[2] = seq_s
    ids[#ids + 1], seqs[#ids + 1] = id, seq
    blobs[#ids] = string.match(e, "^%d+|[^|]+|(.*)$") or false
  end
end
if #ids == 0 then return out end
local pend = redis.call("ZMSCORE", KEYS[2], unpack(ids))
local errs = redis.call("HMGET", KEYS[4], unpack(ids))
for i, id in ipairs(ids) do
  if pend[i] and tonumber(pend[i]) == seqs[i] then
    local blob = blobs[i] or redis.call("HGET", KEYS[3], id)
    local data, size = "", -1
    if blob then data, size = preview(blob, tonumber(ARGV[4])) end
    out[#out + 1] = id
    out[#out + 1] = seqs[i]
    out[#out + 1] = data
    out[#out + 1] = size
    out[#out + 1] = errs[i] or ""
  end
end
return out
