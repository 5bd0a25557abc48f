-- claim.lua: lease ids a worker popped from one ready list (at once, or
-- when a handler it started without a lease runs longer than that allows).
--
-- Task data of encoding version 2 names its queue by number: the script
-- reads the name from the shard's queues hash ({tag}:queues, not
-- declared, in the shard's slot; lib.lua's queue_name), and fails with
-- "TRYAGAIN ...", nothing written, while that hash is not on the node.
--
-- KEYS[1] tasks      HASH  task id -> encoded task
-- KEYS[2] inflight   ZSET  task id -> lease deadline ms
-- KEYS[3] leases     HASH  task id -> delivery token
-- KEYS[4] pending    ZSET  task id -> sequence, of the popped list's queue
-- KEYS[5] dead       ZSET  task id -> time buried
-- KEYS[6] dead info  HASH  task id -> JSON
-- KEYS[7] counts     HASH  task counts (see lib.lua's count): each leased
--                          task enters "l|<queue>", a buried one "d|<queue>"
-- ARGV[1] lease in ms, or "" for each task's own timeout
-- ARGV[2..n] popped ready-list entries, "seq|id" or "seq|id|task" (the
--            task part is ignored: the lease reads the stored data)
--
-- An entry is leased only if its id is pending under the entry's sequence
-- number: a leftover duplicate entry (a re-delivery) or a cancelled task is
-- skipped. An entry already leased under its own number (the caller's
-- earlier claim ran but its reply was lost) is returned again with that
-- lease, unchanged, so a claim can be retried. Data that is not a whole
-- header of either version (lib.lua's header) is buried with decode's reason. Returns {now, id_1, token_1, deadline_1, blob_1,
-- id_2, ...} for the leased ids only; token_i is the entry's sequence
-- number (a string), deadline_i unix ms.
local qn = queue_names(KEYS[1])
local now = now_ms()
local out = {now}

-- Entries whose id is pending under their very number, each id once.
local ids, seqs, seen = {}, {}, {}
for i = 2, #ARGV do
  local _, id, seq_s = ready_entry(ARGV[i])
  if id and not seen[id] then
    seen[id] = true
    ids[#ids + 1] = id
    seqs[#seqs + 1] = seq_s
  end
end
if #ids == 0 then return out end
local live, live_seq, rest, rest_seq = {}, {}, {}, {}
for k, sc in ipairs(bulk_read("ZMSCORE", KEYS[4], ids)) do
  if sc and tonumber(sc) == tonumber(seqs[k]) then
    live[#live + 1] = ids[k]
    live_seq[#live] = seqs[k]
  else
    rest[#rest + 1] = ids[k]
    rest_seq[#rest] = seqs[k]
  end
end
-- Not pending under their number but leased under it: the caller's
-- earlier claim of the same entry ran and its reply was lost. Returned
-- again with their current deadline, unchanged.
if #rest > 0 then
  for i, tok in ipairs(bulk_read("HMGET", KEYS[3], rest)) do
    local id = rest[i]
    if tok and tok == rest_seq[i] then
      local blob = redis.call("HGET", KEYS[1], id)
      local deadline = tonumber(redis.call("ZSCORE", KEYS[2], id))
      if blob and deadline then
        out[#out + 1] = id
        out[#out + 1] = tok
        out[#out + 1] = deadline
        out[#out + 1] = blob
      end
    end
  end
end
if #live == 0 then return out end
local blobs = bulk_read("HMGET", KEYS[1], live)
-- Every name read before anything is written (lib.lua's queue_name may
-- fail with TRYAGAIN).
for _, blob in ipairs(blobs) do blob_queue(blob or nil, qn) end
bulk("ZREM", KEYS[4], live)
-- The delivery token is the entry's own sequence number: unique in the
-- shard, and consumed here (the pending entry is gone), so no delivery
-- ever shares it. With a fixed lease every deadline is the same.
local fixed = tonumber(ARGV[1])
local fixed_s = fixed and string.format("%d", now + fixed)
local deadlines, tokens, leased = {}, {}, {}
for i, id in ipairs(live) do
  local blob = blobs[i]
  -- The header is read here (the lease needs its timeout); the worker
  -- decodes the rest and dead-letters a payload it cannot read.
  local _, _, _, to = header(blob, qn)
  if to then
    local token = live_seq[i]
    local deadline = now + (fixed or tonumber(to))
    deadlines[#deadlines + 1] = fixed_s or string.format("%d", deadline)
    deadlines[#deadlines + 1] = id
    tokens[#tokens + 1] = id
    tokens[#tokens + 1] = token
    out[#out + 1] = id
    out[#out + 1] = token
    out[#out + 1] = deadline
    out[#out + 1] = blob
    local q = blob_queue(blob, qn)
    leased[q] = (leased[q] or 0) + 1
  else
    local _, why = decode(blob or nil, qn)
    bury(KEYS[5], KEYS[6], id, now, why or "undecodable task data", "", KEYS[7], blob_queue(blob or nil, qn))
  end
end
for q, n in pairs(leased) do count(KEYS[7], "l", q, n) end
if #deadlines > 0 then
  bulk("ZADD", KEYS[2], deadlines)
  bulk("HSET", KEYS[3], tokens)
end
return out
