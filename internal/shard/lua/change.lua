-- change.lua: change a pending task in place, keeping its id, attempts
-- and last error: its due time, its payload, or both (docs/protocol.md,
-- "Changing a pending task"). Atomic: a task the mover or a worker is
-- taking at the same moment is either changed before it is taken or
-- answered "active".
--
-- Task data of encoding version 2 names its queue by number: the script
-- reads the name from the shard's queues hash ({tag}:queues, not
-- declared, in the shard's slot; lib.lua's queue_name), and fails with
-- "TRYAGAIN ...", nothing written, while that hash is not on the node.
--
-- KEYS[1] delayed    ZSET  task id -> due ms
-- KEYS[2] tasks      HASH  task id -> encoded task
-- KEYS[3] inflight   ZSET  task id -> lease deadline ms
-- KEYS[4] dead       ZSET  task id -> time buried
-- KEYS[5] queues     HASH  queue name -> policy (for max_payload)
-- KEYS[6] counts     HASH  task counts (lib.lua's count)
-- ARGV[1] task id
-- ARGV[2] ready-list key prefix of this shard (the queue name follows)
-- ARGV[3] pending key prefix of this shard (the queue name follows)
--   (a ready task's list and pending set are not declared: the script
--   checks that this node serves them before it writes, see lib.lua's
--   served_here)
-- ARGV[4] wake channel of this shard: a new due time that becomes the
--         shard's earliest is published there (as enqueue.lua does)
-- ARGV[5] new due time: "" keeps it; absolute unix ms ("1795338744244",
--         at most 13 digits) or a delay after Redis server time ("+30000",
--         at most 12 digits)
-- ARGV[6] how the new due time applies: "set" (it replaces the old one),
--         "min" (the earlier of the two), "max" (the later of the two)
-- ARGV[7] "1": ARGV[8] replaces the payload; "": the payload is kept
-- ARGV[8] the new payload (opaque bytes, at most the queue's max_payload)
-- ARGV[9] optional: the latest due time the change may set, absolute unix
--         ms: a new due time after it becomes it (debounce.lua's MaxWait)
-- ARGV[10] optional: the task's new priority level, "0" normal, "1" high,
--         "2" low ("" or absent keeps it; docs/fairness.md, "Priorities")
--
-- A scheduled task (in the delayed set) gets its new due time there. A
-- task in the far tier leaves it for the delayed set, and its enqueue
-- time, which its bucket entry "id|enqueued_ms" names, moves 1 ms later:
-- the entry no longer matches the task, and the promotion drops it as it
-- drops the entry of a task enqueued anew (move.lua). A ready
-- task that no worker has popped yet leaves its ready list for the
-- delayed set when its due time changes to a later one than now (the
-- mover moves it again when it is due; it is counted scheduled again),
-- and keeps its place in the list when only its payload changes or it
-- is due at once. A fair queue's ready task still waiting for its key's
-- turn is changed in its key's list the same way (docs/fairness.md); a
-- change of its level alone moves its entry to the end of the key's list
-- of the new level. A task a worker has popped or leased, and a dead
-- letter, are not changed.
--
-- Returns {code, state, due_ms}:
--   { 1, state, due}  changed (or nothing to change); state is what the
--                     task was: "scheduled" (delayed set or far tier) or
--                     "ready"; due is its due time now
--   { 0, "", 0}       no such task
--   {-1, "active", 0} a worker popped or leased it: it runs or is about to
--   {-2, "dead", 0}   a dead letter (replay it to run it again)
--   {-3, message, 0}  invalid argument, or data that does not decode
--   {-4, max, 0}      the payload is larger than the queue's max_payload
-- or the error "TRYAGAIN ...", nothing written, while the shard's slot is
-- being migrated and the task's ready list or pending set is not on this
-- node.
local qn = queue_names(KEYS[2])
local id = ARGV[1]
if id == "" or string.find(id, "|", 1, true) then
  return {-3, "invalid task id", 0}
end
local blob = redis.call("HGET", KEYS[2], id)
if not blob then return {0, "", 0} end
if redis.call("ZSCORE", KEYS[3], id) then return {-1, "active", 0} end
if redis.call("ZSCORE", KEYS[4], id) then return {-2, "dead", 0} end
local t, why = decode(blob, qn)
if not t then return {-3, why, 0} end

local due = t.due
if ARGV[5] ~= "" then
  local d
  local delay = string.match(ARGV[5], "^%+(%d+)$")
  if delay and #delay <= 12 then
    d = now_ms() + tonumber(delay)
  elseif #ARGV[5] <= 13 and string.match(ARGV[5], "^%d+$") then
    d = tonumber(ARGV[5])
  else
    return {-3, "invalid due time (unix ms, at most 13 digits, or +delay ms, at most 12)", 0}
  end
  if ARGV[6] == "set" then due = d
  elseif ARGV[6] == "min" then due = math.min(d, t.due)
  elseif ARGV[6] == "max" then due = math.max(d, t.due)
  else return {-3, "invalid due rule (set, min or max)", 0} end
  if ARGV[9] and ARGV[9] ~= "" then
    if #ARGV[9] > 13 or not string.match(ARGV[9], "^%d+$") then
      return {-3, "invalid latest due time (unix ms, at most 13 digits)", 0}
    end
    due = math.min(due, tonumber(ARGV[9]))
  end
end
local level = t.level
if ARGV[10] and ARGV[10] ~= "" then
  level = tonumber(ARGV[10])
  if ARGV[10] ~= "0" and ARGV[10] ~= "1" and ARGV[10] ~= "2" then
    return {-3, "invalid priority level (0 normal, 1 high, 2 low)", 0}
  end
end
local payload = string.sub(blob, t.pos)
if ARGV[7] == "1" then
  local policy = redis.call("HGET", KEYS[5], t.queue) or ""
  local max = string.match(policy, "^%d+|%d+|(%d+)") or string.match(policy, "^drain|%d+|%d+|(%d+)")
  if not max then return {-3, "no policy for queue " .. t.queue .. " in this shard", 0} end
  if #ARGV[8] > tonumber(max) then return {-4, max, 0} end
  payload = ARGV[8]
end

-- Where the task is: the delayed set, its ready list (pending, not
-- popped), or the far tier (in no set).
local state, seq = "scheduled", nil
local pk, rk = ARGV[3] .. t.queue, ARGV[2] .. t.queue
-- A fair queue's task waiting for its key's turn has its entry in its
-- key's list, not in the ready list (lib.lua's fair_wait).
local ring = fair_ring(KEYS[1], t.queue)
local fk = fair_list(ring, fair_key(id), t.level)
local nk = fair_list(ring, fair_key(id), level)
local score = redis.call("ZSCORE", KEYS[1], id)
if not score then
  local moving = served_here(KEYS[1], {pk, rk, fk, nk, fair_sibling(ring, "v")})
  if moving then return moving end
  seq = redis.call("ZSCORE", pk, id)
  if seq then
    seq = tonumber(seq)
    if popped(rk, seq) then return {-1, "active", 0} end
    state = "ready"
  end
end
local old_due = t.due
if due == old_due and ARGV[7] ~= "1" and level == t.level then return {1, state, due} end
if state == "scheduled" and not score and due ~= old_due then
  -- Leaving the far tier for the delayed set: its bucket entry is made
  -- stale (see the top).
  t.enqueued = t.enqueued + 1
end
t.due = due
local was_level = t.level
t.level = level
local changed = encode(t, blob, payload)
redis.call("HSET", KEYS[2], id, changed)
tally(KEYS[6], ARGV[7] == "1" and "replace" or "reschedule")
if state == "ready" then
  if seq >= fair_wait_base() then rk = fk end
  local seq_s = string.format("%d", seq)
  local entry = seq_s .. "|" .. id .. "|" .. blob
  if due == old_due or due <= now_ms() then
    -- Only the payload changed, or the task is due at once: the entry
    -- keeps its place in the list, with the changed task. (An entry
    -- without the task, "seq|id", the form before entries carried it,
    -- has nothing to rewrite: its worker reads the task data.)
    if rk == fk and level ~= was_level then
      -- Waiting for its key's turn under another level: to the end of
      -- the new level's list (the key stays on the ring; it has this
      -- task waiting).
      if redis.call("LREM", rk, 1, entry) == 0 then redis.call("LREM", rk, 1, seq_s .. "|" .. id) end
      if level > 0 then
        redis.call("HSETNX", fair_sibling(ring, "v"), fair_key(id), "0|0|0|0")
        redis.call("HSET", KEYS[5], "|lvl|" .. t.queue, "1") -- lib.lua's fair_caps
      end
      redis.call("RPUSH", nk, seq_s .. "|" .. id .. "|" .. changed)
      return {1, state, due}
    end
    local at = redis.call("LPOS", rk, entry)
    if at then redis.call("LSET", rk, at, seq_s .. "|" .. id .. "|" .. changed) end
    return {1, state, due}
  end
  -- Taken back: the entry leaves the list, the task waits in the delayed
  -- set for its new time.
  if redis.call("LREM", rk, 1, entry) == 0 then
    redis.call("LREM", rk, 1, seq_s .. "|" .. id) -- an entry without the task
  end
  redis.call("ZREM", pk, id)
  count(KEYS[6], "s", t.queue, 1)
elseif due == old_due then
  return {1, state, due} -- only the payload changed
end
schedule(KEYS[1], ARGV[4], id, due)
return {1, state, due}
