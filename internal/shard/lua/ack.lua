-- ack.lua: deliveries succeeded; delete their tasks.
--
-- KEYS[1] tasks      HASH  task id -> encoded task
-- KEYS[2] inflight   ZSET  task id -> lease deadline ms
-- KEYS[3] leases     HASH  task id -> delivery token
-- KEYS[4] errors     HASH  task id -> last error
-- ARGV[1] pending key prefix of this shard (the queue name is appended)
-- ARGV[2..] triples: task id, delivery token, queue. The queue is "" for a
--   leased delivery; for a delivery run without a lease (yet) it names the
--   queue whose pending set holds the id under the token, the number of
--   the popped entry. Any number of triples, one shard.
--
-- Returns one integer per triple: 1 when acknowledged, 0 when the token is
-- not the task's current one (the task was re-delivered, rescheduled or
-- cancelled); that task is left unchanged. A delivery named with its queue
-- may have been leased meanwhile (a lease of the same token): both are
-- checked. One command per kind and queue for the whole batch.
-- Fast path, the common call under a steady load (one delivery run
-- without a lease, still pending under its number): the same commands as
-- below, without building the batch tables. Anything else falls through.
if #ARGV == 4 and ARGV[4] ~= "" then
  local pk = ARGV[1] .. ARGV[4]
  local sc = redis.call("ZSCORE", pk, ARGV[2])
  if sc and tonumber(sc) == tonumber(ARGV[3]) then
    redis.call("ZREM", pk, ARGV[2])
    redis.call("HDEL", KEYS[1], ARGV[2])
    redis.call("HDEL", KEYS[4], ARGV[2])
    return {1}
  end
end
local n = (#ARGV - 1) / 3
local out, done = {}, {}
local leased = {} -- indexes to check against the leases hash
-- Deliveries without a lease: by queue, one ZMSCORE each.
local byq = {}
for k = 1, n do
  local q = ARGV[3 * k + 1]
  if q == "" then
    leased[#leased + 1] = k
  else
    byq[q] = byq[q] or {}
    local l = byq[q]
    l[#l + 1] = k
  end
end
for q, ks in pairs(byq) do
  local pk = ARGV[1] .. q
  local gone = {}
  for i = 1, #ks, 1000 do
    local part = {}
    for j = i, math.min(i + 999, #ks) do part[#part + 1] = ARGV[3 * ks[j] - 1] end
    local scores = redis.call("ZMSCORE", pk, unpack(part))
    for j, sc in ipairs(scores) do
      local k = ks[i + j - 1]
      if sc and tonumber(sc) == tonumber(ARGV[3 * k]) then
        out[k] = 1
        gone[#gone + 1] = ARGV[3 * k - 1]
      else
        leased[#leased + 1] = k -- leased meanwhile, or stale
      end
    end
  end
  if #gone > 0 then bulk("ZREM", pk, gone) end
  for _, id in ipairs(gone) do done[#done + 1] = id end
end
local held = {}
for i = 1, #leased, 1000 do
  local part = {}
  for j = i, math.min(i + 999, #leased) do part[#part + 1] = ARGV[3 * leased[j] - 1] end
  local tokens = redis.call("HMGET", KEYS[3], unpack(part))
  for j, tok in ipairs(tokens) do
    local k = leased[i + j - 1]
    if tok and tok == ARGV[3 * k] then
      out[k] = 1
      held[#held + 1] = ARGV[3 * k - 1]
    else
      out[k] = 0
    end
  end
end
if #held > 0 then
  bulk("ZREM", KEYS[2], held)
  bulk("HDEL", KEYS[3], held)
  for _, id in ipairs(held) do done[#done + 1] = id end
end
if #done > 0 then
  bulk("HDEL", KEYS[1], done)
  bulk("HDEL", KEYS[4], done)
end
return out
