-- debounce.lua: one call of a debounced or throttled producer, by a key
-- of the caller's (docs/protocol.md, "Debounce and throttle"). The key's
-- window is a string KEYS[7] of the key's shard, "first_ms|end_ms|task
-- id|n": when the window's first call came, when it ends (trailing: when
-- its task is due), the task the window may still change (or ""), and
-- how many calls it has taken. A call at or after the end opens the next
-- window; the string expires then. Atomic: calls for one key from any
-- number of producers take their turns in Redis.
--
-- @include: enqueue.lua as enqueue_protocol(KEYS, ARGV)
-- @include: change.lua as change_task(KEYS, ARGV)
--
-- KEYS[1..6] as enqueue.lua: delayed, tasks, queues, far, counts, layout
--            marker (KEYS[6] with the "@gen" argument)
-- KEYS[7] window   STRING the key's window (above)
-- KEYS[8] inflight ZSET   task id -> lease deadline ms (change.lua)
-- KEYS[9] dead     ZSET   task id -> time buried (change.lua)
-- ARGV[1] mode: "trailing" (every call replaces the window's task's
--         payload and moves it to now + delay, never past the first call
--         + max wait), "leading" (the first call runs at once; the calls
--         within the window are dropped, and each moves the window's end
--         to now + delay, never past the first call + max wait),
--         "leading+trailing" (as leading, and the dropped calls are kept
--         as one task at the window's end, with the last payload) or
--         "throttle" (the first call runs at once; the window is delay
--         long and the calls within it are dropped)
-- ARGV[2] delay ms (1 or more)
-- ARGV[3] max wait ms (0: none; trailing, leading and leading+trailing)
-- ARGV[4] "@<gen>" (the producer's layout generation, as enqueue.lua's
--         first argument) or ""
-- ARGV[5] wake channel of the shard
-- ARGV[6] id for a task this call creates: a fresh id of this shard
-- ARGV[7] queue
-- ARGV[8] max retries ("" for the queue's)
-- ARGV[9] timeout ms ("" for the queue's)
-- ARGV[10] payload
-- ARGV[11] ready-list key prefix, ARGV[12] pending key prefix (change.lua)
--
-- Returns {code, id, due_ms, n}:
--   { 1, id, due, n}  a window opened with a new task, id, due at due
--   { 2, id, due, n}  the window's task id took this call's payload and
--                     is due at due
--   { 3, id, end, n}  dropped: the window (its task id, "" for none) is
--                     open until end
--   {code, detail, 0, 0}  enqueue.lua refused the new task (its code and
--                     detail: -1 unknown queue, -2 payload too large, -3
--                     invalid argument, 0 the fresh id is taken); nothing
--                     written
--   or enqueue.lua's error (TRYAGAIN, LAYOUT ...), nothing written
-- n is the call's turn in its window (1 for the first).
local mode, delay, max_wait = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if not delay or delay < 1 or not max_wait or max_wait < 0 or
    (mode ~= "trailing" and mode ~= "leading" and mode ~= "leading+trailing" and mode ~= "throttle") then
  return {-3, "debounce: invalid mode, delay or max wait", 0, 0}
end
local now = now_ms()
local first, wend, id, n
local rec = redis.call("GET", KEYS[7])
if rec then
  local f, e, i, c = string.match(rec, "^(%d+)|(%d+)|([^|]*)|(%d+)$")
  first, wend, id, n = tonumber(f), tonumber(e), i, tonumber(c)
  if not first or now >= wend then rec = nil end
end
-- save records the window and returns the call's reply.
local function save(code, w_first, w_end, w_id, turn, due)
  redis.call("SET", KEYS[7], string.format("%d", w_first) .. "|" .. string.format("%d", w_end) .. "|" .. w_id .. "|" .. turn,
    "PXAT", string.format("%d", math.max(w_end, due, now + 1)))
  tally(KEYS[5], "debounce")
  return {code, w_id, due, turn}
end

-- enqueue stores this call's task, due at due. It returns enqueue.lua's
-- reply ({1, due, ""} when it stored the task; a refusal as this
-- script's reply, {code, detail, 0, 0}) or its error.
local function enqueue(due)
  -- An absolute time: Redis's clock moves while a script runs, and a
  -- delay would be added to a later reading than this call's now.
  local argv = {ARGV[5], ARGV[6], string.format("%d", due), ARGV[7], ARGV[8], ARGV[9], ARGV[10]}
  if ARGV[4] ~= "" then table.insert(argv, 1, ARGV[4]) end
  local r = enqueue_protocol({KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]}, argv)
  if r.err or r[1] == 1 then return r end
  return {r[1], r[3], 0, 0}
end

-- change gives the window's task this call's payload and the due time
-- due_arg (change.lua's), never after cap (nil: none); true when it did
-- (false: the task was taken, or is gone), or change.lua's error.
local function change(due_arg, cap)
  local argv = {id, ARGV[11], ARGV[12], ARGV[5], due_arg, "set", "1", ARGV[10]}
  if cap then argv[9] = string.format("%d", cap) end
  local r = change_task({KEYS[1], KEYS[2], KEYS[8], KEYS[9], KEYS[3], KEYS[5]}, argv)
  if r.err then return nil, r end
  return r[1] == 1, r[3]
end

if mode == "trailing" then
  -- The window is open until its task is due (the quiet period after the
  -- last call elapsed, or max wait after the first): a call after that
  -- opens the next window, and the task runs as it was.
  if rec and id ~= "" then
    local cap = max_wait > 0 and first + max_wait or nil
    local ok, due = change("+" .. string.format("%d", delay), cap)
    if ok == nil then return due end
    if ok then return save(2, first, due, id, n + 1, due) end
    -- Taken by a worker (or gone): this call opens a new window.
  end
  local due = now + delay
  if max_wait > 0 then due = math.min(due, now + max_wait) end
  local r = enqueue(due)
  if r.err or r[1] ~= 1 then return r end
  return save(1, now, r[2], ARGV[6], 1, r[2])
end

if rec then
  -- Within the window. Leading windows end delay after the last call,
  -- never past the first call + max wait; a throttle's does not move.
  if mode ~= "throttle" then
    wend = now + delay
    if max_wait > 0 then wend = math.min(wend, first + max_wait) end
  end
  if mode == "leading+trailing" then
    -- Kept as the one trailing run, at the window's end.
    if id ~= "" then
      local ok, due = change(string.format("%d", wend), nil)
      if ok == nil then return due end
      if ok then return save(2, first, wend, id, n + 1, due) end
    end
    local r = enqueue(wend)
    if r.err or r[1] ~= 1 then return r end
    return save(1, first, wend, ARGV[6], n + 1, r[2])
  end
  return save(3, first, wend, id, n + 1, wend)
end
-- A window opens: its first call runs at once. In leading+trailing the
-- window's task to change is the trailing one, not this one.
local r = enqueue(now)
if r.err or r[1] ~= 1 then return r end
local ends = now + delay
if mode ~= "throttle" and max_wait > 0 then ends = math.min(ends, now + max_wait) end
save(1, now, ends, mode == "leading+trailing" and "" or ARGV[6], 1, r[2])
return {1, ARGV[6], r[2], 1}
