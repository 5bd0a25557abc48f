-- ack.lua: deliveries succeeded; delete their tasks.
--
-- Task data of encoding version 2 names its queue by number: the script
-- reads the name from the shard's queues hash ({tag}:queues, not
-- declared, in the shard's slot; lib.lua's queue_name), and fails with
-- "TRYAGAIN ...", nothing written, while that hash is not on the node.
--
-- KEYS[1] tasks      HASH  task id -> encoded task
-- KEYS[2] inflight   ZSET  task id -> lease deadline ms
-- KEYS[3] leases     HASH  task id -> delivery token
-- KEYS[4] errors     HASH  task id -> last error
-- KEYS[5] counts     HASH  task counts (see lib.lua's count): an acked
--                          leased task leaves "l|<queue>"
-- ARGV[1] pending key prefix of this shard (the queue name is appended;
--         these sets are not declared: the script checks that this node
--         serves them before it writes, see lib.lua's served_here)
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
-- Fails with "TRYAGAIN ...", nothing written, while the shard's slot is
-- being migrated and a pending set it names is not on this node.
--
-- One delivery, the usual call under a steady load: lib.lua's
-- end_delivery makes the same checks as the batch code below, for one id,
-- without building the batch tables.
local qn = queue_names(KEYS[1])
if #ARGV == 4 then
  local pk = ARGV[4] ~= "" and ARGV[1] .. ARGV[4] or nil
  if pk then
    local moving = served_here(KEYS[1], {pk})
    if moving then return moving end
  end
  -- The queue of a lease ended here: the one the worker names (a task
  -- leased after its pop, of that queue's list), else its data's, read
  -- before anything is written (lib.lua's queue_name may fail).
  local q = ARGV[4]
  if not pk then q = blob_queue(redis.call("HGET", KEYS[1], ARGV[2]), qn) end
  local ended = end_delivery(KEYS[2], KEYS[3], pk, ARGV[2], ARGV[3])
  if not ended then
    return {0}
  end
  if ended == "lease" then count(KEYS[5], "l", q, -1) end
  redis.call("HDEL", KEYS[1], ARGV[2])
  redis.call("HDEL", KEYS[4], ARGV[2])
  return {1}
end
local n = (#ARGV - 1) / 3
local out, done = {}, {}
local leased = {} -- indexes to check against the leases hash
-- Deliveries without a lease: by queue, one ZMSCORE each. queue_of: the
-- queue of each delivery (the one the worker names, else its data's).
local byq, queue_of = {}, {}
for k = 1, n do
  local q = ARGV[3 * k + 1]
  if q == "" then
    leased[#leased + 1] = k
  else
    queue_of[k] = q
    byq[q] = byq[q] or {}
    local l = byq[q]
    l[#l + 1] = k
  end
end
-- The pending sets are not in KEYS: check them all before the first
-- write (lib.lua's served_here).
local pks = {}
for q in pairs(byq) do pks[#pks + 1] = ARGV[1] .. q end
local moving = served_here(KEYS[1], pks)
if moving then return moving end
-- The queue of a delivery leased first: its data's, read before anything
-- is written (lib.lua's queue_name may fail).
if #leased > 0 then
  local ids = {}
  for j, k in ipairs(leased) do ids[j] = ARGV[3 * k - 1] end
  for j, blob in ipairs(bulk_read("HMGET", KEYS[1], ids)) do
    queue_of[leased[j]] = blob_queue(blob or nil, qn)
  end
end
for q, ks in pairs(byq) do
  local pk = ARGV[1] .. q
  local ids, gone = {}, {}
  for j, k in ipairs(ks) do ids[j] = ARGV[3 * k - 1] end
  for j, sc in ipairs(bulk_read("ZMSCORE", pk, ids)) do
    local k = ks[j]
    if sc and (sc == ARGV[3 * k] or tonumber(sc) == tonumber(ARGV[3 * k])) then
      out[k] = 1
      gone[#gone + 1] = ids[j]
    else
      leased[#leased + 1] = k -- leased meanwhile, or stale
    end
  end
  if #gone > 0 then bulk("ZREM", pk, gone) end
  for _, id in ipairs(gone) do done[#done + 1] = id end
end
local held, held_k, lids = {}, {}, {}
for j, k in ipairs(leased) do lids[j] = ARGV[3 * k - 1] end
for j, tok in ipairs(bulk_read("HMGET", KEYS[3], lids)) do
  local k = leased[j]
  if tok and tok == ARGV[3 * k] then
    out[k] = 1
    held[#held + 1] = lids[j]
    held_k[#held_k + 1] = k
  else
    out[k] = 0
  end
end
if #held > 0 then
  bulk("ZREM", KEYS[2], held)
  bulk("HDEL", KEYS[3], held)
  local nq = {}
  for _, k in ipairs(held_k) do
    local q = queue_of[k]
    nq[q] = (nq[q] or 0) + 1
  end
  for q, c in pairs(nq) do count(KEYS[5], "l", q, -c) end
  for _, id in ipairs(held) do done[#done + 1] = id end
end
if #done > 0 then
  bulk("HDEL", KEYS[1], done)
  bulk("HDEL", KEYS[4], done)
end
return out
