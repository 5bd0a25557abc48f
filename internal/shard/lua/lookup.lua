-- lookup.lua: report one task's state, read-only.
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
-- KEYS[5] dead info  HASH  task id -> JSON {reason, error, at}
-- KEYS[6] errors     HASH  task id -> last error (optional)
-- KEYS[7] outbox     HASH  optional (needs KEYS[6]): tasks on their way
--                          to another shard while the shard count
--                          changes (export.lua); reported as they were
-- ARGV[1] task id
-- ARGV[2] pending key prefix of this shard (the queue name is appended)
-- ARGV[3] ready-list key prefix of this shard (the queue name is appended)
--   (these lists are not declared: the script checks that this node
--   serves them before it reads them, see lib.lua's served_here)
-- ARGV[4] optional: the shard's ended HASH (lib.lua's record_end), read when no
--         task of the id is stored (not declared; while the shard's slot
--         migrates, a node that does not serve it reads nothing there)
--
-- Returns {state, encoded task or "", score or "", dead info or "", last
-- error or ""}:
--   state is "scheduled" (score = due; a task in the far tier is in no set,
--   its due time is read from its data), "ready", "active" (score = lease
--   deadline, or "" for a task a worker popped and runs without a lease), "dead" (score = time buried),
--   or "" when unknown;
-- or {"ended", record}: no task data, but a record of the task's end in
--   ARGV[4] (lib.lua's record_end: "state|at_ms|was|queue|result",
--   state "succeeded" or "cancelled");
-- or the error "TRYAGAIN ..." while the shard's slot is being migrated
-- and the task's pending set or ready list is not on this node (a list
-- not moved yet would read as empty there).
local qn = queue_names(KEYS[2])
local id = ARGV[1]
local blob = redis.call("HGET", KEYS[2], id) or ""
if blob == "" and KEYS[7] then
  local entry = redis.call("HGET", KEYS[7], id)
  if entry then
    local e = cmsgpack.unpack(entry)
    if e[1] == "x" then return {"dead", e[3], string.format("%d", e[2]), e[4], e[5]} end
    local _, _, _, _, due = header(e[3], qn)
    return {"scheduled", e[3], due or "", "", e[5]}
  end
end
if blob == "" and ARGV[4] then
  local e = redis.pcall("HGET", ARGV[4], id)
  if type(e) == "string" then return {"ended", e} end
end
local info = redis.call("HGET", KEYS[5], id) or ""
local last = KEYS[6] and redis.call("HGET", KEYS[6], id) or ""
local s = redis.call("ZSCORE", KEYS[3], id)
if s then return {"active", blob, s, info, last} end
s = redis.call("ZSCORE", KEYS[4], id)
if s then return {"dead", blob, s, info, last} end
s = redis.call("ZSCORE", KEYS[1], id)
if s then return {"scheduled", blob, s, info, last} end
if blob ~= "" then
  local q, _, _, _, due = header(blob, qn)
  if q and ARGV[2] then
    local moving = served_here(KEYS[1], {ARGV[2] .. q, ARGV[3] and ARGV[3] .. q or nil})
    if moving then return moving end
  end
  local seq = q and ARGV[2] and redis.call("ZSCORE", ARGV[2] .. q, id)
  if q and ARGV[2] and not seq then
    return {"scheduled", blob, due, info, last}
  end
  -- Popped from its ready list: a worker runs it (not leased yet).
  if seq and ARGV[3] and popped(ARGV[3] .. q, tonumber(seq)) then
    return {"active", blob, "", info, last}
  end
  return {"ready", blob, "", info, last}
end
return {"", "", "", "", ""}
