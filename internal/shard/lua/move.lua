-- move.lua: move due tasks of one shard into their queues' ready lists.
-- Run only by the shard's owner; fenced by epoch; bounded by LIMIT. Each
-- ready entry is "seq|id|encoded task" (see make_ready in lib.lua).
--
-- Task data of encoding version 2 names its queue by number: the script
-- reads the name from the shard's queues hash (KEYS[11]'s key, read even
-- when KEYS[11] is not given; lib.lua's queue_name), and fails with
-- "TRYAGAIN ...", nothing written, while that hash is not on the node.
--
-- KEYS[1] delayed    ZSET  task id -> due ms
-- KEYS[2] tasks      HASH  task id -> encoded task
-- KEYS[3] epoch      STRING fencing epoch of the current owner
-- KEYS[4] dead       ZSET  task id -> time buried (ms)
-- KEYS[5] dead info  HASH  task id -> JSON {reason, error, at}
-- KEYS[6] stats      HASH  counters (stale_epoch)
-- KEYS[7] seq        STRING sequence counter of the shard
-- KEYS[8] ready queues SET  queues that have had ready ids in this shard
-- KEYS[9] far        ZSET  far-tier buckets (see enqueue.lua)
-- KEYS[10] counts    HASH  task counts (see lib.lua's count): each moved
--                          task leaves "s|<queue>"; a buried one enters "d|"
-- KEYS[11] queues    HASH  registered queues (optional): a task whose queue
--                          is not registered in the shard is buried with
--                          the reason "unknown queue" instead of going to a
--                          ready list nothing reads
-- ARGV[1] caller's epoch (etcd revision of its ownership)
-- ARGV[2] LIMIT: most tasks to move in this call, 1 or more
-- ARGV[3] ready-list key prefix of this shard; the queue name is appended
-- ARGV[4] pending key prefix of this shard; the queue name is appended
--         (these lists, and the far tier's bucket lists KEYS[9] .. ":" ..
--         bucket, are not declared: the script checks that this node
--         serves them before it writes, see lib.lua's served_here)
-- ARGV[5] prefetch ms (optional, default 0): also move tasks due up to this
--         long after now. Their ready entries carry their due time, and
--         workers hold each until then (see scheduler.prefetch in
--         docs/operations.md); 0 moves only tasks already due.
-- ARGV[6] dense window ms (optional, default 0): with next_due, also count
--         the members due within this long after it (internal/scan stages
--         a dense batch, many tasks due at about one time, ahead of it)
--
-- Returns {1, moved, next_due, now_us, buried, promoted, ahead, next_wake, lateness_1, ...}
--   moved     tasks pushed to ready lists (plus buried = tasks examined)
--   next_due  due ms of the earliest remaining member, -1 if none (the far
--             tier's member "|far" counts: its score is the earliest
--             bucket's promotion time); with a prefetch it is later than
--             now + prefetch, unless promoted > 0 (then call again)
--   now_us    Redis server time used, unix MICROseconds (so that the owner
--             can time its sleep to the next due millisecond exactly)
--   buried    tasks moved to the dead-letter set (no or undecodable data,
--             an unknown queue, a corrupt due time)
--   promoted  far-tier entries taken from a due bucket into KEYS[1] (at
--             most LIMIT per call); the owner calls again at once
--   ahead     members due from next_due to next_due + ARGV[6] ms, both
--             included (one ZCOUNT); 0 without ARGV[6] or a next_due
--   next_wake the time (ms) a fair queue's key held for its next token
--             gets it, the earliest in the shard (the queues hash's field
--             "|fwnext", lib.lua's fair_hold), -1 if none: the owner calls
--             at that time exactly. A call at or after it puts the keys
--             whose time has come ("<tag>:fairwake") back on their rings
--             and refills their windows; never ahead of it, whatever the
--             prefetch.
--   lateness_i  now - due of each moved task, ms (negative: moved early)
-- or {-1, stored_epoch} when ARGV[1] is older than the stored epoch;
-- or the error "TRYAGAIN ...", nothing written, while the shard's slot is
-- being migrated and a list it needs is not on this node.
-- Fair queues (queues hash field "|fair|<queue>" holds the window; see
-- docs/fairness.md): a moved task of such a queue goes to its key's list
-- instead of the ready list (lib.lua's fair_wait), pending under a number
-- above fair_wait_base(), and the ready list is then refilled up to the
-- window in turns between the keys (fair_refill). It counts as moved.
-- While other tasks are due behind a fair queue's run of one key, the
-- call takes at most the window of the run (spread, below), and a key's
-- list holds at most fair_park_depth(window): the rest of its due run
-- stays in the delayed set, parked (field of "<tag>:fairp:<queue>"),
-- until a refill brings the list low and wakes the owner. When every due
-- task left is parked, next_due is the due time of the first task not yet
-- due (-1 if none), so that the owner sleeps instead of calling again.
-- Publishes: a ready list this call makes non-empty is announced on the
-- shard channel of the same name (lib.lua's ready_pushed).
--
-- Corrupt due times (lib.lua's valid_due: a score below 0, above the
-- largest due time enqueue.lua accepts, or not finite): a due one (below
-- 0) is buried with the reason "corrupt due time"; one later than every
-- valid time is never due, and counts as no next due time here (the
-- recovery pass buries those, recover.lua).
local qn = queue_names(KEYS[2])
local ok, stored = fence(KEYS[3], KEYS[6], ARGV[1])
if not ok then
  return {-1, stored}
end

local t = redis.call("TIME")
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(now_us / 1000)
local limit = tonumber(ARGV[2])
local window = tonumber(ARGV[6] or "0") or 0
-- ahead_of returns how many members are due within the window after the
-- next due time nd (the reply's ahead).
local function ahead_of(nd)
  if window <= 0 or nd < 0 then return 0 end
  return redis.call("ZCOUNT", KEYS[1], string.format("%d", nd), string.format("%d", nd + window))
end
-- cut: the latest due time moved by this call.
local cut = now
if ARGV[5] and ARGV[5] ~= "0" then
  cut = now + tonumber(ARGV[5])
end
-- Probe the head by rank: when at most one task is due (an idle or
-- lightly loaded shard: the usual call moves one task), this one read
-- yields both the due task and the next due time. Only a shard with more
-- due reads again by score. The probe is small because every entry costs:
-- Redis formats each score as a double and Lua parses it back. Numeric
-- arguments go to redis.call as strings: a Lua number would be formatted
-- with %.14g, printf's slow float path.
local due = redis.call("ZRANGE", KEYS[1], "0", "1", "WITHSCORES")
local next_due = -1 -- known next due time; nil: read it after moving
local n = #due / 2
for i = 1, n do
  local sc = tonumber(due[2 * i])
  due[2 * i] = sc -- parsed once
  if sc > cut then
    next_due = valid_due(sc) and sc or -1
    for j = #due, 2 * i - 1, -1 do due[j] = nil end
    break
  end
end
-- spread returns the batch to move from due, a full batch read from the
-- head of the delayed set, so that one key's run of a fair queue does not
-- fill it while other tasks are due behind it (docs/fairness.md, "The
-- mover's order"). Tasks due at one time sort by id, so a key's tasks due
-- at one time are one run of ranks (its ids share the prefix "{key}"): a
-- run of a fair queue's key followed by other due members gives at most
-- the queue's window of its tasks, and the batch goes on after the run's
-- end, found by rank (binary search, one ZRANGE per probe). A run that
-- reaches the end of what is due is not cut. Batches without an id that
-- starts with "{" are returned as they are (one byte compare a task).
local park = {} -- pairs: a parked-keys hash and a key spread parked in it, written after the checks
local read_blobs = {} -- id -> its data (false: none), as spread read it, for the batch below
local function spread(due)
  if #due / 2 < limit then return due end
  local keyed = false
  for i = 1, #due, 2 do
    if string.byte(due[i], 1) == 123 then
      keyed = true
      break
    end
  end
  -- "|fair" in the queues hash: some queue is fair (RegisterQueues).
  if not keyed or redis.call("HEXISTS", qn.key, "|fair") == 0 then return due end
  local ndue = redis.call("ZCOUNT", KEYS[1], "-inf", string.format("%d", cut))
  if ndue <= #due / 2 then return due end
  local buf, bbase = due, 0 -- members read, the first at rank bbase
  local function at(r) -- member and score at rank r, read LIMIT at a time
    local i = 2 * (r - bbase) + 1
    if i < 1 or i > #buf then
      buf, bbase, i = redis.call("ZRANGE", KEYS[1], r, r + limit - 1, "WITHSCORES"), r, 1
    end
    return buf[i], buf[i + 1]
  end
  local function probe(r) -- the same, one member read when not at hand
    local i = 2 * (r - bbase) + 1
    if i >= 1 and i <= #buf then return buf[i], buf[i + 1] end
    local m = redis.call("ZRANGE", KEYS[1], r, r, "WITHSCORES")
    return m[1], m[2]
  end
  local windows = {} -- queue -> its window, false when not fair
  local function window_of(r, id) -- id is at rank r, in buf
    if read_blobs[id] == nil then
      -- The data of this member and the next ones read with it, 64 at a
      -- time (one HMGET, not one HGET a run): the batch reuses it.
      local ms, i = {}, 2 * (r - bbase) + 1
      for j = i, math.min(#buf, i + 127), 2 do
        if read_blobs[buf[j]] == nil then ms[#ms + 1] = buf[j] end
      end
      for j, b in ipairs(bulk_read("HMGET", KEYS[2], ms)) do read_blobs[ms[j]] = b end
    end
    local q = blob_queue(read_blobs[id] or nil, qn)
    if windows[q] == nil then windows[q] = q ~= "" and fair_window(qn.key, q) or false end
    return windows[q], q
  end
  local out, budget, pos, runs, parked, unparked = {}, limit, 0, 0, false, false
  while budget > 0 and pos < ndue do
    local id, sc = at(pos)
    if not id then break end
    local k = string.byte(id, 1) == 123 and fair_key(id) or ""
    local w, q
    if k ~= "" and runs < 1000 then w, q = window_of(pos, id) end
    if w then
      runs = runs + 1
      local prefix = "{" .. k .. "}"
      local function in_run(r)
        local m, sr = probe(r)
        return m ~= nil and sr == sc and string.sub(m, 1, #prefix) == prefix
      end
      -- The run's last rank: along what was read, then by binary search
      -- between the last rank known in the run (lo) and the last due.
      local lo, hi = pos, ndue - 1
      while lo < hi and 2 * (lo + 1 - bbase) + 1 <= #buf and in_run(lo + 1) do lo = lo + 1 end
      if lo < hi and 2 * (lo + 1 - bbase) + 1 > #buf then
        while lo < hi do
          local mid = math.floor((lo + hi + 1) / 2)
          if in_run(mid) then lo = mid else hi = mid - 1 end
        end
      end
      local take = lo - pos + 1
      local cut = lo < ndue - 1 and take > w -- others are due behind the run
      if cut then take = w end
      -- A backlog is not moved faster than it is served: the key's list
      -- holds at most fair_park_depth(w); the rest of the run stays in
      -- the delayed set, parked, until a refill brings the list low.
      local ring = fair_ring(KEYS[1], q)
      -- (A run of one task is not checked: a key whose tasks come due
      -- one at a time is not a backlog to park.)
      local room = fair_park_depth(w)
      if take > 1 then room = room - fair_len(ring, k) end
      if room < take then
        take = math.max(room, 0)
        park[#park + 1] = fair_sibling(ring, "p")
        park[#park + 1] = k
        parked = true
      elseif cut or take > budget then
        unparked = true -- due tasks of the run stay, not parked
      end
      take = math.min(take, budget)
      for r = pos, pos + take - 1 do
        local m, s = at(r)
        out[#out + 1] = m
        out[#out + 1] = s
      end
      budget = budget - take
      pos = lo + 1
    else
      out[#out + 1] = id
      out[#out + 1] = sc
      budget = budget - 1
      pos = pos + 1
    end
  end
  -- Every due task was looked at, and every one left is parked: the next
  -- due time is that of the first task not yet due (the parked wait for
  -- a refill's wake-up, not for a timer). A run cut to the window, not
  -- parked, leaves due tasks to the next call, at once.
  if parked and not unparked and pos >= ndue then
    local nd = redis.call("ZRANGE", KEYS[1], ndue, ndue, "WITHSCORES")
    return out, tonumber(nd[2] or "-1")
  end
  return out
end

local fast_wake = nil -- the queues hash's "|fwnext", when the one-task path read it
if #due == 4 then -- both entries the probe read are due
  local after
  due, after = spread(redis.call("ZRANGE", KEYS[1], "-inf", string.format("%d", cut), "BYSCORE", "LIMIT", "0", ARGV[2], "WITHSCORES"))
  next_due = after -- nil: read after moving
elseif #due == 2 and due[1] ~= "|far" and due[2] >= 0 then
  -- One task due, the usual call at a steady rate: lib.lua's make_ready
  -- writes what the batch code below writes for it, without the batch
  -- tables. Data without a queue takes the batch code, which buries it
  -- with the reason.
  local id = due[1]
  local blob = redis.call("HGET", KEYS[2], id)
  local q = blob_queue(blob or nil, qn)
  if q == "" then q = nil end
  -- A version 2 number has a name in the shard only while its queue is
  -- registered there (the registration writes both, recovery deletes
  -- both): only a name read from version 1 data needs the check.
  if q and KEYS[11] and string.byte(blob, 1) ~= 2 and redis.call("HEXISTS", KEYS[11], q) == 0 then
    q = nil -- the batch code buries it
  end
  -- One read of the queues hash: a fair queue's task, or a key's token
  -- whose time has come, take the batch code.
  local f = redis.call("HMGET", qn.key, "|fair|" .. (q or ""), "|fwnext")
  fast_wake = tonumber(f[2] or "") or -1
  if q and (f[1] or (fast_wake >= 0 and fast_wake <= now)) then q = nil end
  if q then
    local pk, rk = ARGV[4] .. q, ARGV[3] .. q
    local moving = served_here(KEYS[1], {pk, rk})
    if moving then return moving end
    redis.call("ZREM", KEYS[1], id)
    make_ready(KEYS[7], pk, rk, id, blob)
    redis.call("SADD", KEYS[8], q)
    redis.call("HINCRBY", KEYS[10], "s|" .. q, -1)
    return {1, 1, next_due, now_us, 0, 0, ahead_of(next_due), fast_wake, now - due[2]}
  end
end

-- promote takes up to LIMIT entries of the earliest far-tier bucket, if
-- its promotion time is no later than cut, into KEYS[1] at their due
-- times, then re-scores "|far" by the next promotion time (or removes
-- it). fh is that bucket as ZRANGE KEYS[9] 0 0 WITHSCORES returned it. An
-- entry whose task is gone (cancelled) or was enqueued anew under the
-- same id (another enqueued_ms) is stale and dropped; data it cannot read
-- goes to KEYS[1] as due now, where the mover buries it with the reason.
local function promote(fh)
  local far_key, n = KEYS[9], 0
  if fh[2] and tonumber(fh[2]) <= cut then
    queues_here(qn) -- the entries' names are read after they are popped
    local entries = redis.call("LPOP", far_key .. ":" .. fh[1], limit)
    if not entries or #entries < limit then
      redis.call("ZREM", far_key, fh[1])
    end
    if entries then
      n = #entries
      local ids, enqs = {}, {}
      for i, e in ipairs(entries) do
        local id, enq = string.match(e, "^(.+)|(%d+)$")
        ids[i], enqs[i] = id or "", enq or ""
      end
      local z = {}
      for k, blob in ipairs(bulk_read("HMGET", KEYS[2], ids)) do
        if blob then
          local _, _, _, _, d, enq = header(blob, qn)
          if not d then
            z[#z + 1] = now
            z[#z + 1] = ids[k]
          elseif enq == enqs[k] then
            z[#z + 1] = d
            z[#z + 1] = ids[k]
          end
        end
      end
      bulk("ZADD", KEYS[1], z)
    end
    fh = redis.call("ZRANGE", far_key, 0, 0, "WITHSCORES")
  end
  if fh[2] then
    redis.call("ZADD", KEYS[1], fh[2], "|far")
  else
    redis.call("ZREM", KEYS[1], "|far")
  end
  return n
end

local out = {1, 0, -1, now_us, 0, 0, 0, -1} -- [7]: ahead, [8]: next_wake, set last
-- Keys of fair queues whose next token has come (lib.lua's fair_hold):
-- put back and their windows refilled below, after the checks.
local fairwake = (string.match(KEYS[1], "^{[^}]*}") or "") .. ":fairwake"
local next_wake = fast_wake or tonumber(redis.call("HGET", qn.key, "|fwnext") or "") or -1
local woken = {}
if next_wake >= 0 and next_wake <= now then
  for _, m in ipairs(redis.call("ZRANGE", fairwake, "-inf", string.format("%d", now), "BYSCORE", "LIMIT", "0", "64")) do
    local q, k = string.match(m, "^([^|]+)|(.*)$")
    woken[#woken + 1] = {q or "", k or "", m}
  end
end
local moved, buried, promoted = 0, 0, 0
local far_due = false
-- The due members other than "|far", and their due times.
local ids, dues = {}, {}
for i = 1, #due, 2 do
  if due[i] == "|far" then
    far_due = true
  else
    ids[#ids + 1] = due[i]
    dues[#dues + 1] = due[i + 1]
  end
end
-- Everything this call reads comes first: the tasks' data and, when the
-- far tier is due, its earliest bucket. Then lib.lua's served_here checks
-- the lists it will write, which are not in KEYS (each queue's pending
-- set and ready list, the bucket's list), before anything is written.
-- Only the queue is read here (the worker reads the rest from the ready
-- entry, which carries the task); data without one is buried with the
-- full decoder's reason.
-- (Data spread read already is not read again.)
local blobs, missing, slot = {}, {}, {}
for i, id in ipairs(ids) do
  local b = read_blobs[id]
  if b == nil then
    missing[#missing + 1] = id
    slot[#missing] = i
  else
    blobs[i] = b
  end
end
for j, b in ipairs(bulk_read("HMGET", KEYS[2], missing)) do blobs[slot[j]] = b end
local queues, queued, lists, listed = {}, 0, {}, {}
-- why[i]: the reason a task that names a queue is buried (nil: it moves).
local why, known = {}, {}
if KEYS[11] and #ids > 0 then
  local names, seen = {}, {}
  for i in ipairs(ids) do
    local q = blob_queue(blobs[i] or nil, qn)
    if q ~= "" and string.byte(blobs[i], 1) == 2 then
      known[q] = true -- registered, as in the one-task case above
    elseif q ~= "" and not seen[q] then
      seen[q] = true
      names[#names + 1] = q
    end
  end
  if #names > 0 then
    local reg = redis.call("HMGET", KEYS[11], unpack(names))
    for k, q in ipairs(names) do known[q] = known[q] or reg[k] ~= false end
  end
end
for i in ipairs(ids) do
  local q = blob_queue(blobs[i] or nil, qn)
  if q == "" then q = nil end
  if q and not valid_due(tonumber(dues[i])) then
    why[i], q = "corrupt due time", nil
  elseif q and KEYS[11] and not known[q] then
    why[i], q = "unknown queue", nil
  end
  if q then
    queues[i] = q
    queued = queued + 1
    if not listed[q] then
      listed[q] = true
      lists[#lists + 1] = ARGV[4] .. q
      lists[#lists + 1] = ARGV[3] .. q
    end
  end
end
-- Fair queues (lib.lua's fair_wait): their tasks wait in their keys'
-- lists, and the window is refilled from them.
local fairw, fkeys, flevels, flagged = {}, {}, {}, {}
local fkey_of, flevel_of = {}, {} -- a fair queue's task i: its key and level
if queued > 0 then
  local names, fields = {}, {}
  -- With each queue's window, "|lvl|<q>": keys of the queue may have
  -- lists of other levels than normal (lib.lua's fair_wait).
  for q in pairs(listed) do
    names[#names + 1] = q
    fields[#fields + 1] = "|fair|" .. q
    fields[#fields + 1] = "|lvl|" .. q
  end
  local v = redis.call("HMGET", qn.key, unpack(fields))
  for k, q in ipairs(names) do
    fairw[q] = tonumber(v[2 * k - 1] or "")
    if fairw[q] then
      fair_state(fair_ring(KEYS[1], q), lists)
      fkeys[q], flevels[q] = {}, {}
      flagged[q] = v[2 * k] and true or false
    end
  end
  -- Each key's list, and its levels' lists where it may have some: the
  -- queue is flagged, or a task of the batch has a level.
  -- (Each task's key and level are kept for fair_wait below.)
  local seen, order = {}, {}
  for i, id in ipairs(ids) do
    local q = queues[i]
    if q and fairw[q] then
      local ring, k = fair_ring(KEYS[1], q), fair_key(id)
      fkey_of[i], flevel_of[i] = k, blob_level(blobs[i])
      local l = ring .. "|" .. k
      if seen[l] == nil then
        seen[l] = false
        order[#order + 1] = {ring, k, q}
      end
      if not seen[l] and (flagged[q] or flevel_of[i] > 0) then seen[l] = true end
    end
  end
  for _, o in ipairs(order) do
    local l = o[1] .. "|" .. o[2]
    lists[#lists + 1] = l
    fair_lists(o[1], o[2], lists, seen[l])
  end
end
local fh
if far_due then
  fh = redis.call("ZRANGE", KEYS[9], 0, 0, "WITHSCORES")
  if fh[2] and tonumber(fh[2]) <= cut then lists[#lists + 1] = KEYS[9] .. ":" .. fh[1] end
end
for i = 1, #park, 2 do lists[#lists + 1] = park[i] end
if #woken > 0 then
  lists[#lists + 1] = fairwake
  lists[#lists + 1] = qn.key
  for _, wk in ipairs(woken) do
    if wk[1] ~= "" then
      local ring = fair_ring(KEYS[1], wk[1])
      fair_state(ring, lists)
      lists[#lists + 1] = ring .. "|" .. wk[2]
      fair_lists(ring, wk[2], lists, true)
      lists[#lists + 1] = fair_sibling(ring, "r") .. "|" .. wk[2]
      fair_buckets(ring, nil, wk[2], lists)
      lists[#lists + 1] = ARGV[4] .. wk[1]
      lists[#lists + 1] = ARGV[3] .. wk[1]
    end
  end
end
local moving = served_here(KEYS[1], lists)
if moving then return moving end
for i = 1, #park, 2 do redis.call("HSET", park[i], park[i + 1], "1") end
if #woken > 0 then
  for _, wk in ipairs(woken) do
    redis.call("ZREM", fairwake, wk[3])
  end
  -- The next time is the earliest left, before the refills below hold
  -- keys again (fair_hold lowers it itself).
  local head = redis.call("ZRANGE", fairwake, "0", "0", "WITHSCORES")
  if head[2] then
    redis.call("HSET", qn.key, "|fwnext", head[2])
  else
    redis.call("HDEL", qn.key, "|fwnext")
  end
  for _, wk in ipairs(woken) do
    if wk[1] ~= "" then
      local ring = fair_ring(KEYS[1], wk[1])
      local pk, rk = ARGV[4] .. wk[1], ARGV[3] .. wk[1]
      fair_unblock(ring, {wk[2]}, pk)
      if redis.call("LLEN", ring) > 0 then
        fair_refill(ring, KEYS[7], pk, rk, fair_window(qn.key, wk[1]) or 32)
      end
    end
  end
end
if #ids > 0 then
  -- One command per kind for the whole batch (the HMGET above, ZREM,
  -- INCRBY), and per queue one RPUSH and one ZADD.
  bulk("ZREM", KEYS[1], ids)
  for i, id in ipairs(ids) do
    if not queues[i] then
      local reason = why[i]
      if reason then
        -- Counted scheduled at enqueue: it leaves that count.
        count(KEYS[10], "s", blob_queue(blobs[i], qn), -1)
      else
        local _, bad = decode(blobs[i] or nil, qn)
        reason = bad or "undecodable task data"
      end
      bury(KEYS[4], KEYS[5], id, now, reason, "", KEYS[10], blob_queue(blobs[i] or nil, qn))
      buried = buried + 1
    end
  end
  if queued > 0 then
    -- Sequence numbers base+1 .. base+queued, in due order (see make_ready).
    local seq = redis.call("INCRBY", KEYS[7], string.format("%d", queued)) - queued
    local entries, pending = {}, {}
    for i, id in ipairs(ids) do
      local q = queues[i]
      if q then
        seq = seq + 1
        local s
        if fairw[q] then
          s = string.format("%d", seq + fair_wait_base())
          local fk = fkeys[q]
          fk[#fk + 1] = fkey_of[i]
          flevels[q][#fk] = flevel_of[i]
        else
          s = string.format("%d", seq)
        end
        if not entries[q] then entries[q], pending[q] = {}, {} end
        local e, p = entries[q], pending[q]
        e[#e + 1] = s .. "|" .. id .. "|" .. blobs[i]
        p[#p + 1] = s
        p[#p + 1] = id
        moved = moved + 1
        out[#out + 1] = now - tonumber(dues[i])
      end
    end
    for q, e in pairs(entries) do
      bulk("ZADD", ARGV[4] .. q, pending[q])
      if fairw[q] then
        local ring = fair_ring(KEYS[1], q)
        fair_wait(ring, fkeys[q], e, flevels[q], flagged[q])
        fair_refill(ring, KEYS[7], ARGV[4] .. q, ARGV[3] .. q, fairw[q])
      else
        ready_pushed(ARGV[3] .. q, bulk("RPUSH", ARGV[3] .. q, e), #e)
      end
      redis.call("SADD", KEYS[8], q)
      redis.call("HINCRBY", KEYS[10], "s|" .. q, -#e)
    end
  end
end

if far_due then
  promoted = promote(fh)
  next_due = nil
end
if next_due == nil then
  local head = redis.call("ZRANGE", KEYS[1], "0", "0", "WITHSCORES")
  next_due = tonumber(head[2] or "-1")
  if not valid_due(next_due) then next_due = -1 end
end
-- A refill of a fair queue may have held a key for its next token.
local fair_ran = #woken > 0
for q in pairs(fairw) do
  if fairw[q] then fair_ran = true end
end
if fair_ran then next_wake = tonumber(redis.call("HGET", qn.key, "|fwnext") or "") or -1 end
out[8] = next_wake
out[3] = next_due
out[2] = moved
out[5] = buried
out[6] = promoted
out[7] = ahead_of(next_due)
return out
