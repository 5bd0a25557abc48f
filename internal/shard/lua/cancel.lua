-- cancel.lua: delete a task that has not started running.
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
-- KEYS[5] dead info  HASH  task id -> JSON
-- KEYS[6] errors     HASH  task id -> last error
-- KEYS[7] counts     HASH  task counts (see lib.lua's count)
-- KEYS[8] outbox     HASH  optional: tasks on their way to another shard
--                          while the shard count changes (export.lua); a
--                          task there is cancelled by moving its entry to
-- KEYS[9] cancelled  HASH  (with KEYS[8]) the outbox entries cancelled on
--                          their way: commit.lua reports them, and the
--                          migration removes their imported copies
-- ARGV[1] task id
-- ARGV[2] ready-list key prefix of this shard
-- ARGV[3] pending key prefix of this shard
--   (a ready task's list and pending set are not declared: the script
--   checks that this node serves them before it writes, see lib.lua's
--   served_here)
-- ARGV[4] optional, "running": a task a worker has (leased, or popped and
--         run without a lease) is cancelled too. Its lease, or its popped
--         entry's pending number, is revoked, so that the worker's ack or
--         nack is refused by token; its data goes; and its id is published
--         on ARGV[8], where the worker that has it hears it and cancels its
--         handler's ctx. Without it such a task answers "active".
-- ARGV[5] leases   HASH  task id -> delivery token
-- ARGV[6] ended    HASH  task id -> "cancelled|<ms>|<state it was in>|<queue>|"
-- ARGV[7] ended index prefix (the queue name is appended): ZSET id -> ms
-- ARGV[8] the deployment's cancel channel ({ns}:cancel)
-- ARGV[9] how long the record of a running task cancelled is kept, ms,
--         and ARGV[10] how many per queue at most, for a queue that keeps
--         no records of its ended tasks
-- ARGV[11] queues  HASH  "|keep|<queue>" -> the queue's retention
-- ARGV[12] prefix of the task's done channel (the id is appended)
--   (ARGV[5], [6], [7] and [11] are not declared: the script checks that
--   this node serves them before it writes, see lib.lua's served_here)
--   With ARGV[4], a cancelled task is recorded as ended (lib.lua's
--   record_end, which Lookup reports and publishes on the done channel):
--   a running one always (for ARGV[9]/ARGV[10] unless its queue keeps
--   records), a scheduled or ready one when its queue keeps records.
--
-- Returns {code, state[, queue]}:
--   { 1, state, queue} cancelled; state is what it was: scheduled (in the
--                delayed set or the far tier), ready, dead, or (with
--                "running") active; queue is the task's queue ("" when
--                its data names none, and left out for a task without
--                data or on its way to another shard)
--   { 0, ""}     no such task
--   {-1, "active"} the task is running under a lease, or a worker popped
--                it from its ready list (it runs it or is about to); not
--                cancelled (without "running")
-- or the error "TRYAGAIN ...", nothing written, while the shard's slot is
-- being migrated and the task's ready list or pending set is not on this
-- node.
local qn = queue_names(KEYS[2])
local id = ARGV[1]
if string.find(id, "|", 1, true) then
  return redis.error_reply("cancel: invalid task id")
end
local blob = redis.call("HGET", KEYS[2], id)
if not blob and KEYS[8] then
  local entry = redis.call("HGET", KEYS[8], id)
  if entry then
    redis.call("HDEL", KEYS[8], id)
    redis.call("HSET", KEYS[9], id, entry)
    tally(KEYS[7], "cancel")
    return {1, cmsgpack.unpack(entry)[1] == "x" and "dead" or "scheduled"}
  end
end
if not blob then
  -- A member without data (written by hand) is removed as well.
  if redis.call("ZREM", KEYS[1], id) == 1 then
    tally(KEYS[7], "cancel")
    return {1, "scheduled"}
  end
  if redis.call("ZREM", KEYS[4], id) == 1 then
    redis.call("HDEL", KEYS[5], id)
    count(KEYS[7], "d", "", -1) -- the mover buried it, counted under no queue
    tally(KEYS[7], "cancel")
    return {1, "dead"}
  end
  return {0, ""}
end
local running = ARGV[4] == "running"

-- keep is the queue's record retention, when a record may be written.
local queue = blob_queue(blob, qn)
if running then
  local moving = served_here(KEYS[1], {ARGV[11]})
  if moving then return moving end
end
local keep = running and queue ~= "" and keep_of(ARGV[11], queue)

-- record writes the cancelled task's record (lib.lua's record_end).
local function record(was, k)
  record_end(ARGV[6], ARGV[7] .. queue, ARGV[11], ARGV[12] .. id, id, "cancelled", was, queue, "", k, now_ms())
end

-- cancel_running ends a task a worker has: leased, or (pending_key given)
-- popped and run under its pending number. See ARGV[4].
local function cancel_running(pending_key)
  local moving = served_here(KEYS[1], {ARGV[5], ARGV[6], ARGV[7] .. queue})
  if moving then return moving end
  if pending_key then
    redis.call("ZREM", pending_key, id)
  else
    redis.call("ZREM", KEYS[3], id)
    redis.call("HDEL", ARGV[5], id)
    count(KEYS[7], "l", queue, -1)
  end
  redis.call("HDEL", KEYS[2], id)
  redis.call("HDEL", KEYS[6], id)
  record("active", keep or {tonumber(ARGV[9]), tonumber(ARGV[10])})
  redis.call("PUBLISH", ARGV[8], id)
  tally(KEYS[7], "cancel")
  return {1, "active", queue}
end

if redis.call("ZSCORE", KEYS[3], id) then
  if running then return cancel_running(nil) end
  return {-1, "active"}
end

local state = "ready"
if keep then
  local moving = served_here(KEYS[1], {ARGV[6], ARGV[7] .. queue})
  if moving then return moving end
end
-- A task in no set and no pending list is in the far tier (see
-- enqueue.lua): deleting its data is enough, its bucket entry is then
-- dropped at promotion.
if redis.call("ZREM", KEYS[1], id) == 1 then
  state = "scheduled"
elseif redis.call("ZREM", KEYS[4], id) == 1 then
  redis.call("HDEL", KEYS[5], id)
  state = "dead"
else
  local task = decode(blob, qn)
  if task then
    -- Nothing is written yet (both ZREMs removed nothing): check the
    -- queue's lists, not in KEYS, first.
    local moving = served_here(KEYS[1], {ARGV[3] .. task.queue, ARGV[2] .. task.queue})
    if moving then return moving end
    local seq = redis.call("ZSCORE", ARGV[3] .. task.queue, id)
    if seq then
      local rk, seq_s = ARGV[2] .. task.queue, string.format("%d", tonumber(seq))
      -- A popped entry is in a worker's hands: it may be running already.
      if popped(rk, tonumber(seq)) then
        if running then return cancel_running(ARGV[3] .. task.queue) end
        return {-1, "active"}
      end
      if redis.call("LREM", rk, 0, seq_s .. "|" .. id .. "|" .. blob) == 0 then
        redis.call("LREM", rk, 0, seq_s .. "|" .. id) -- an entry without the task
      end
      redis.call("ZREM", ARGV[3] .. task.queue, id)
    else
      state = "scheduled"
    end
  end
end
if state == "scheduled" then
  count(KEYS[7], "s", queue, -1)
elseif state == "dead" then
  count(KEYS[7], "d", queue, -1)
end
redis.call("HDEL", KEYS[2], id)
redis.call("HDEL", KEYS[6], id)
if keep and state ~= "dead" then record(state, keep) end
tally(KEYS[7], "cancel")
return {1, state, queue}
