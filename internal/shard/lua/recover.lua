-- recover.lua: the shard owner's recovery pass. Fenced by epoch; each
-- part is bounded by LIMIT.
--   1. Leases that expired (a worker died or was cut off): the task goes
--      back to the delayed set with attempts+1 and backoff, or to the
--      dead-letter set with reason "lease expired" once retries are spent.
--      Its token is dropped, so the old worker's late ack is rejected.
--   2. Stranded ids: popped from a ready list by a worker that neither
--      settled nor leased them (it crashed; workers run popped tasks before
--      leasing them). ARGV[9..] are the candidates the previous pass
--      returned; those still popped-and-unleased now count a failed attempt
--      like an expired lease: rescheduled with backoff, or buried with
--      reason "worker lost the task before leasing it". The pass returns
--      the next candidates.
--   3. Dead-letter retention: entries older than the age bound or beyond
--      the size bound are deleted with their data.
--   4. Removed queues (policy "drain|..." in KEYS[8]) that have no task
--      left in this shard lose their registration (their interned name
--      and number included), counters and a fair queue's state here.
--   5. Corrupt due times: delayed-set members scored beyond the latest
--      due time enqueue.lua accepts (inf included), which never come due,
--      are buried with the reason "corrupt due time" (counted in
--      buried). Those below 0 are due: the mover buries them.
--   6. Records of ended tasks (lib.lua's record_end) older than their
--      queue's age (queues hash field "|rec|<queue>", which record_end
--      writes) are deleted, and the field once the queue has none.
--   2c. A fair queue's window (docs/fairness.md) that a worker left short
--      (it died between a pop and the refill it sends after it) is
--      refilled from its keys' lists (lib.lua's fair_refill); a queue no
--      longer fair has LIMIT of its tasks still in keys' lists moved to
--      its ready list per pass. Keys held at their concurrency cap that
--      have a permit free again go back on the ring first
--      (lib.lua's fair_unblock).
--   A task buried in part 1 or 2a whose queue keeps records is published
--   "dead" on its done channel (Client.Wait).
--
-- Task data of encoding version 2 names its queue by number: the script
-- reads the name from the shard's queues hash ({tag}:queues, not
-- declared, in the shard's slot; lib.lua's queue_name), and fails with
-- "TRYAGAIN ...", nothing written, while that hash is not on the node.
--
-- KEYS[1] delayed  KEYS[2] tasks  KEYS[3] inflight  KEYS[4] leases
-- KEYS[5] errors   KEYS[6] dead   KEYS[7] dead info KEYS[8] queues
-- KEYS[9] epoch    KEYS[10] stats KEYS[11] ready queues
--   (SET of the queues that have had ready ids in this shard)
-- KEYS[12] counts (HASH of task counts, see lib.lua's count)
-- ARGV[1] caller's epoch
-- ARGV[2] LIMIT per part
-- ARGV[3] random seed (integer 1..2147483646) for backoff jitter
-- ARGV[4] wake channel of the shard
-- ARGV[5] ready-list key prefix; ARGV[6] pending key prefix (queue appended;
--   these lists are not declared: the script checks that this node serves
--   those of every queue it looks at before it writes, see lib.lua's
--   served_here)
-- ARGV[7] dead-letter size bound, 0 = none
-- ARGV[8] dead-letter age bound in ms, 0 = none
-- ARGV[9] prefix of a task's done channel (the id is appended)
-- ARGV[10] ended HASH; ARGV[11] ended index prefix (the queue name is
--   appended; both not declared, checked like ARGV[5] and ARGV[6])
-- ARGV[12..] stranded candidates from the previous pass, "queue|seq|id"
--
-- Returns {1, now, retried, buried, redelivered, trimmed, next_deadline,
-- pending, records_dropped, next_expiry, candidate_1, ..., by_queue}:
-- by_queue (an array, last) is {queue, retried, buried, ...}, the failed
-- attempts of parts 1 and 2a per queue (for the queue history); next_deadline
-- is the earliest lease deadline (-1 if none), pending the number of
-- ready-but-unleased ids, records_dropped the records of part 6 and
-- next_expiry the earliest expiry of a record left (-1 if none); or
-- {-1, stored_epoch} when the epoch is stale; or the error "TRYAGAIN ...",
-- nothing written, while the shard's slot is being migrated and a list it
-- needs is not on this node.
local qn = queue_names(KEYS[2])
local ok, stored = fence(KEYS[9], KEYS[10], ARGV[1])
if not ok then
  return {-1, stored}
end

-- The queues whose lists this pass reads or writes: the candidates'
-- (2a), those that had ready ids (2b) and the removed ones (4). Their
-- lists are not in KEYS: check them before the first write.
local ready_queues = redis.call("SMEMBERS", KEYS[11])
local policies = redis.call("HGETALL", KEYS[8])
local lists, listed = {}, {}
local function list(q)
  if not listed[q] then
    listed[q] = true
    lists[#lists + 1] = ARGV[6] .. q
    lists[#lists + 1] = ARGV[5] .. q
    fair_state(fair_ring(KEYS[1], q), lists)
  end
end
for i = 12, #ARGV do
  local q = string.match(ARGV[i], "^([^|]+)|%d+|.+$")
  if q then list(q) end
end
for _, q in ipairs(ready_queues) do list(q) end
-- Queues that keep records of their ended tasks (keeps: a task buried
-- is published), and those that have records (recs: their age).
local keeps, recs = {}, {}
for i = 1, #policies, 2 do
  if string.sub(policies[i + 1], 1, 6) == "drain|" then list(policies[i]) end
  local q = string.match(policies[i], "^|keep|(.+)$")
  if q then keeps[q] = true end
  q = string.match(policies[i], "^|rec|(.+)$")
  if q and tonumber(policies[i + 1]) then
    recs[q] = tonumber(policies[i + 1])
    lists[#lists + 1] = ARGV[11] .. q
  end
end
if next(recs) then lists[#lists + 1] = ARGV[10] end
local moving = served_here(KEYS[1], lists)
if moving then return moving end
local limit = tonumber(ARGV[2])
local seed = tonumber(ARGV[3])
local function rnd()
  seed = (seed * 48271) % 2147483647
  return seed / 2147483647
end
local now = now_ms()
local retried, buried, redelivered, trimmed = 0, 0, 0, 0
-- by_queue counts the failed attempts per queue: {retried, buried}.
local by_queue = {}
local function failed(queue, i)
  local c = by_queue[queue]
  if not c then
    c = {0, 0}
    by_queue[queue] = c
  end
  c[i] = c[i] + 1
end

-- fail counts a failed attempt of id, whose delivery is over (its lease
-- or pending entry already removed): it reschedules the task with backoff
-- and records why as its last error, or buries it with why as the reason
-- once its retries are spent. Returns true when rescheduled.
local function fail(id, why)
  local blob = redis.call("HGET", KEYS[2], id)
  local queue = blob_queue(blob, qn)
  local task, bad = decode(blob, qn)
  if not task then
    bury(KEYS[6], KEYS[7], id, now, bad, "", KEYS[12], queue)
    failed(queue, 2)
    return false
  end
  task.attempts = task.attempts + 1
  if task.attempts > task.max_retries then
    local last = redis.call("HGET", KEYS[5], id) or ""
    redis.call("HSET", KEYS[2], id, encode(task, blob))
    bury(KEYS[6], KEYS[7], id, now, why, last, KEYS[12], queue)
    redis.call("HDEL", KEYS[5], id)
    if keeps[queue] then redis.call("PUBLISH", ARGV[9] .. id, "dead") end
    failed(queue, 2)
    return false
  end
  local spec = policy_backoff(redis.call("HGET", KEYS[8], task.queue))
  task.due = now + backoff_ms(spec, task.attempts, rnd())
  redis.call("HSET", KEYS[2], id, encode(task, blob))
  redis.call("HSET", KEYS[5], id, why)
  schedule(KEYS[1], ARGV[4], id, task.due)
  count(KEYS[12], "s", queue, 1)
  failed(queue, 1)
  return true
end

-- 1. expired leases. The earliest deadline first: on a shard with none
-- due (an idle one above all) it is also the next deadline returned, and
-- the range read is skipped.
local next_deadline = redis.call("ZRANGE", KEYS[3], 0, 0, "WITHSCORES")
local expired = {}
if next_deadline[2] and tonumber(next_deadline[2]) <= now then
  expired = redis.call("ZRANGE", KEYS[3], "-inf", now, "BYSCORE", "LIMIT", 0, limit)
end
if #expired > 0 then queues_here(qn) end -- names are read between writes below
for _, id in ipairs(expired) do
  redis.call("ZREM", KEYS[3], id)
  redis.call("HDEL", KEYS[4], id)
  count(KEYS[12], "l", blob_queue(redis.call("HGET", KEYS[2], id), qn), -1)
  if fail(id, "lease expired") then
    retried = retried + 1
  else
    buried = buried + 1
  end
end

-- 2a. candidates of the previous pass still popped and unleased
for i = 12, #ARGV do
  local q, seq_s, id = string.match(ARGV[i], "^([^|]+)|(%d+)|(.+)$")
  if q then
    local pk, rk = ARGV[6] .. q, ARGV[5] .. q
    local s = redis.call("ZSCORE", pk, id)
    if s and tonumber(s) == tonumber(seq_s) then
      if popped(rk, tonumber(seq_s)) then
        -- Its worker may have run it (workers run popped tasks before
        -- leasing them) and died: a failed attempt, as for an expired
        -- lease, so a task that kills its workers cannot loop forever.
        queues_here(qn) -- fail reads its name after this write
        redis.call("ZREM", pk, id)
        fail(id, "worker lost the task before leasing it")
        redelivered = redelivered + 1
      end
    end
  end
end

-- 2b. new candidates: pending ids numbered below their list's head, over
-- every queue that ever had ready ids in this shard (KEYS[11]), at most
-- LIMIT in all
local out = {1, now, 0, 0, 0, 0, -1, 0, 0, -1}
local pending, room = 0, limit
for _, q in ipairs(ready_queues) do
  local pk, rk = ARGV[6] .. q, ARGV[5] .. q
  local n = redis.call("ZCARD", pk)
  if n > 0 then
    pending = pending + n
    local hs = ready_entry(redis.call("LINDEX", rk, 0))
    -- Never a task waiting in a fair queue's key list (lib.lua's
    -- fair_wait): it is numbered from fair_wait_base() on.
    local bound = "(" .. string.format("%d", fair_wait_base())
    if hs and hs < fair_wait_base() then bound = "(" .. string.format("%d", hs) end
    if room > 0 then
      local c = redis.call("ZRANGE", pk, "-inf", bound, "BYSCORE", "LIMIT", 0, room, "WITHSCORES")
      for j = 1, #c, 2 do
        out[#out + 1] = q .. "|" .. string.format("%d", tonumber(c[j + 1])) .. "|" .. c[j]
        room = room - 1
      end
    end
    -- A fair queue's window left short (its worker died between a pop
    -- and the refill it sends after it): refilled here. A queue no
    -- longer fair has its keys' lists drained into its ready list, LIMIT
    -- a pass (its workers no longer refill).
    local ring = fair_ring(KEYS[1], q)
    -- Keys held at their cap whose permits ended without a settle that
    -- said so (a lease recovered above, a task cancelled) go back first.
    fair_unblock(ring, 128, pk)
    if redis.call("LLEN", ring) > 0 then
      local seq_key = (string.match(KEYS[1], "^{[^}]*}") or "") .. ":seq"
      fair_refill(ring, seq_key, pk, rk, fair_window(KEYS[8], q) or redis.call("LLEN", rk) + limit)
    end
  end
end

-- 3. dead-letter retention
local function drop(id)
  count(KEYS[12], "d", blob_queue(redis.call("HGET", KEYS[2], id), qn), -1)
  redis.call("ZREM", KEYS[6], id)
  redis.call("HDEL", KEYS[7], id)
  redis.call("HDEL", KEYS[2], id)
  redis.call("HDEL", KEYS[5], id)
  trimmed = trimmed + 1
end
local max_age = tonumber(ARGV[8])
local max_size = tonumber(ARGV[7])
-- An empty dead-letter set (an idle shard's, usually) costs one ZCARD.
local has_dead = (max_age > 0 or max_size > 0) and redis.call("ZCARD", KEYS[6]) > 0
if has_dead and max_age > 0 then
  for _, id in ipairs(redis.call("ZRANGE", KEYS[6], "-inf", now - max_age, "BYSCORE", "LIMIT", 0, limit)) do
    drop(id)
  end
end
if has_dead and max_size > 0 then
  local excess = redis.call("ZCARD", KEYS[6]) - max_size
  if excess > 0 then
    if excess > limit then excess = limit end
    for _, id in ipairs(redis.call("ZRANGE", KEYS[6], 0, excess - 1)) do
      drop(id)
    end
  end
end

-- 4. removed queues without tasks left in this shard (parts 1 to 3 change
-- neither KEYS[8] nor KEYS[11])
local qs = policies
-- A removed queue's interned name goes with it (task data version 2):
-- data of its number that arrives later (an import) is buried as of an
-- unknown queue, as version 1 data naming it is by the mover.
local numbers = {}
for i = 1, #qs, 2 do
  if string.sub(qs[i], 1, 3) == "|q|" then
    local l = numbers[qs[i + 1]] or {}
    l[#l + 1] = qs[i]
    numbers[qs[i + 1]] = l
  end
end
for i = 1, #qs, 2 do
  local q = qs[i]
  if string.sub(qs[i + 1], 1, 6) == "drain|" then
    local c = redis.call("HMGET", KEYS[12], "s|" .. q, "l|" .. q, "d|" .. q)
    local left = 0
    for _, v in ipairs(c) do left = left + math.max(0, tonumber(v or "0") or 0) end
    left = left + redis.call("LLEN", ARGV[5] .. q) + redis.call("ZCARD", ARGV[6] .. q)
    -- A fair queue's state goes first: its keys' lists (left with
    -- entries of cancelled tasks only), then its ring, its keys' weights,
    -- caps, rates, held keys, turn, parked keys and levels (a key's
    -- permits and bucket expire by themselves), last, so that a pass cut
    -- short still finds the keys. Not declared: while the slot migrates,
    -- a key not on this node fails the DEL, the rest waits, and the queue
    -- stays registered until a later pass deletes it.
    local gone = true
    if left == 0 then
      local ring = fair_ring(KEYS[1], q)
      local state = {}
      local ks = redis.pcall("LRANGE", ring, 0, -1)
      local held = redis.pcall("SMEMBERS", fair_sibling(ring, "b"))
      if type(ks) ~= "table" or ks.err or type(held) ~= "table" or held.err then
        gone = false
      else
        for _, k in ipairs(ks) do fair_lists(ring, k, state, true); state[#state + 1] = ring .. "|" .. k end
        for _, k in ipairs(held) do fair_lists(ring, k, state, true); state[#state + 1] = ring .. "|" .. k end
        local n = #state
        state[#state + 1] = ring
        for _, kind in ipairs({"w", "t", "p", "c", "b", "q", "v"}) do state[#state + 1] = fair_sibling(ring, kind) end
        -- The lists in chunks, then the ring and its siblings in one.
        local i = 1
        while gone and i <= #state do
          local j = i <= n and math.min(i + 999, n) or #state
          local r = redis.pcall("DEL", unpack(state, i, j))
          if type(r) == "table" and r.err then gone = false end
          i = j + 1
        end
      end
    end
    if left == 0 and gone then
      redis.call("HDEL", KEYS[8], q, "|id|" .. q, "|fair|" .. q, "|kcap|" .. q, "|kcapo|" .. q,
        "|krate|" .. q, "|krateo|" .. q, "|lvl|" .. q, unpack(numbers[q] or {}))
      redis.call("HDEL", KEYS[12], "s|" .. q, "l|" .. q, "d|" .. q)
      redis.call("SREM", KEYS[11], q)
    end
  end
end

-- 5. corrupt due times (lib.lua's valid_due): members of the delayed set
-- scored beyond the latest due time (inf included) would never be moved;
-- they are buried with the reason "corrupt due time", their data kept
-- for a replay.
local function bury_corrupt(lo, hi)
  for _, id in ipairs(redis.call("ZRANGE", KEYS[1], lo, hi, "BYSCORE", "LIMIT", 0, limit)) do
    if string.byte(id, 1) ~= 124 then -- not a marker ("|far")
      queues_here(qn)
      local q = blob_queue(redis.call("HGET", KEYS[2], id), qn)
      redis.call("ZREM", KEYS[1], id)
      if q ~= "" then count(KEYS[12], "s", q, -1) end
      bury(KEYS[6], KEYS[7], id, now, "corrupt due time", "", KEYS[12], q)
      buried = buried + 1
    end
  end
end
bury_corrupt("(9999999999999", "+inf")
-- Those below 0 are due: the mover buries them (move.lua) as soon as it
-- looks, which its idle re-check does when they become the head.

-- 6. records of ended tasks past their queue's age, at most LIMIT per
-- queue; the earliest expiry of those left is returned.
local dropped, next_expiry = 0, nil
for q, age in pairs(recs) do
  local ik = ARGV[11] .. q
  local old = redis.call("ZRANGE", ik, "-inf", "(" .. string.format("%d", now - age), "BYSCORE", "LIMIT", 0, limit)
  drop_records(ARGV[10], ik, q, old)
  dropped = dropped + #old
  local first = redis.call("ZRANGE", ik, 0, 0, "WITHSCORES")
  if first[2] then
    local e = tonumber(first[2]) + age
    if not next_expiry or e < next_expiry then next_expiry = e end
  else
    redis.call("HDEL", KEYS[8], "|rec|" .. q)
  end
end

-- Parts 2 to 6 change no lease: the deadline read first still holds
-- unless part 1 took some.
if #expired > 0 then
  next_deadline = redis.call("ZRANGE", KEYS[3], 0, 0, "WITHSCORES")
end
out[3], out[4], out[5], out[6] = retried, buried, redelivered, trimmed
if next_deadline[2] then out[7] = tonumber(next_deadline[2]) end
out[8], out[9], out[10] = pending, dropped, next_expiry or -1
local flat = {}
for q, c in pairs(by_queue) do
  flat[#flat + 1] = q
  flat[#flat + 1] = c[1]
  flat[#flat + 1] = c[2]
end
out[#out + 1] = flat
return out
