-- page.lua: one page of a shard's sorted set of tasks (the delayed set,
-- the in-flight set or the dead-letter set), read-only, for listings.
-- Bounded: at most LIMIT members are examined.
--
-- Task data of encoding version 2 names its queue by number: the script
-- reads the name from the shard's queues hash ({tag}:queues, not
-- declared, in the shard's slot; lib.lua's queue_name), and fails with
-- "TRYAGAIN ...", nothing written, while that hash is not on the node.
--
-- KEYS[1] set        ZSET  task id -> score (due, lease deadline or burial ms)
-- KEYS[2] tasks      HASH  task id -> encoded task
-- KEYS[3] dead info  HASH  task id -> JSON {reason, error, at}
-- KEYS[4] errors     HASH  task id -> last error
-- ARGV[1] cursor score, "" for the first page
-- ARGV[2] cursor member (the last one examined by the previous page)
-- ARGV[3] LIMIT, members examined at most (1..1000)
-- ARGV[4] queue filter, "" for every queue
-- ARGV[5] lowest score listed, "-inf" for none
-- ARGV[6] highest score listed, "+inf" for none
-- ARGV[7] dead-letter reason filter, "" for any
-- ARGV[8] last-error substring filter, "" for any
-- ARGV[9] payload bytes shown per task at most (lib.lua's preview)
-- ARGV[10] optional: "desc" pages from the highest score down (ties in
--         reverse member order); the cursor is then the last member
--         examined going down, and ARGV[5] and ARGV[6] still bound the
--         scores listed
--
-- Returns {next_score, next_member, done, then per matching task: id,
-- score, encoded task with at most ARGV[9] bytes of payload or "", the
-- payload's whole length (-1: no data, or in neither encoding), dead info or
-- "", last error or ""}. done is 1 when the set holds nothing after this
-- page; the delayed set's markers (members starting with "|", which no
-- task id does: "|far", the far tier's) are never listed. Task data is read one task at a time, so a call holds one
-- payload at once, not LIMIT of them.
local qn = queue_names(KEYS[2])
local limit = tonumber(ARGV[3])
local rev = ARGV[10] == "desc"
local first, last = ARGV[5], ARGV[6]
if rev then first, last = last, first end
local start, anchored = page_start(KEYS[1], ARGV[1], ARGV[2], first, rev)
local ids, scores, ns, nm, done = page_rows(KEYS[1], start, anchored, ARGV[1], ARGV[2], limit, last, rev)
local out = {ns, nm, done and 1 or 0}
if #ids == 0 then return out end
local shown = tonumber(ARGV[9])
local infos = redis.call("HMGET", KEYS[3], unpack(ids))
local errs = redis.call("HMGET", KEYS[4], unpack(ids))
for i, id in ipairs(ids) do
  local marker = string.byte(id, 1) == 124
  local blob = not marker and redis.call("HGET", KEYS[2], id)
  if not marker and dead_match(blob or nil, infos[i] or nil, ARGV[4], ARGV[7], ARGV[8], qn) then
    local data, size = "", -1
    if blob then data, size = preview(blob, shown) end
    out[#out + 1] = id
    out[#out + 1] = scores[i]
    out[#out + 1] = data
    out[#out + 1] = size
    out[#out + 1] = infos[i] or ""
    out[#out + 1] = errs[i] or ""
  end
end
return out
