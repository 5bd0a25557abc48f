-- enqueue.lua: store tasks of one shard and schedule them.
--
-- This script is the enqueue protocol: a producer in any language can call
-- it with EVAL/EVALSHA (or `redis-cli --eval`). It needs nothing else. One
-- call takes any number of tasks of the same shard; each gets its own
-- result.
--
-- KEYS[1] delayed  ZSET  task id -> due time (unix ms)
-- KEYS[2] tasks    HASH  task id -> encoded task (see docs/protocol.md)
-- KEYS[3] queues   HASH  queue name -> policy, "max_retries|timeout_ms|max_payload|..."
--                        (further fields are for retries; see docs/protocol.md);
--                        field "|far" = "bucket_ms|lead_ms" turns the far tier on;
--                        field "|id|<queue>" = the queue's number: tasks of a
--                        queue with one are written in encoding version 2
--                        (docs/protocol.md, "Task data"), else version 1
-- KEYS[4] far      ZSET  optional (without it every task goes to KEYS[1]):
--                        far-tier buckets, bucket start ms -> promotion time;
--                        bucket b's entries "id|enqueued_ms" are in the LIST
--                        KEYS[4] .. ":" .. b. A task due in bucket b (its due
--                        time rounded down to bucket_ms) goes there when
--                        b - lead_ms is still in the future; the member "|far"
--                        of KEYS[1] is then scored by the earliest promotion.
--                        The bucket lists are not declared: before it writes
--                        anything the script checks that this node serves
--                        them (see "Slot migrations" in docs/protocol.md).
-- KEYS[5] counts   HASH  optional (needs KEYS[4]): the shard's task counts;
--                        field "s|<queue>" counts the queue's scheduled
--                        tasks (see docs/protocol.md). A producer that
--                        leaves it out makes those counts low.
-- KEYS[6] marker   STRING optional, with the "@gen" argument below: the
--                        shard's layout marker "gen|shards|from" (see
--                        docs/resharding.md; a count is followed by "k"
--                        when its tasks are placed by key: "4|16k|16")
-- ARGV[1] optional "@<gen>": the generation of the producer's layout
--         (0 before the shard count was ever changed). When KEYS[6] holds
--         a newer generation, nothing is written and the call fails with
--         the error "LAYOUT <gen> <shards> <from>" (counts as in the
--         marker): the shard count or the placement rule has changed, and the producer must place each task again by that
--         layout and send it there; or, while the change is being set up
--         (a marker "<gen>|0|0"), with "TRYAGAIN ...": send it again
--         shortly. The arguments below then start at
--         ARGV[2]; a producer that leaves "@<gen>" out is not checked.
-- ARGV[1] wake channel of this shard: when a call makes a task the shard's
--         earliest (or ties the earliest), that due time is published
--         there with SPUBLISH
-- then six arguments per task, for task i at ARGV[2+6(i-1)] onwards:
--   id          task id: 1..256 bytes of UTF-8 without "|" and without
--               control characters (U+0000..U+001F, U+007F..U+009F); see
--               "Task ids" in docs/protocol.md
--   due         absolute unix ms ("1795338744244", at most 13 digits), or a
--               delay in ms after Redis server time ("+30000", at most 12)
--   queue       queue name (must be registered in KEYS[3])
--   max retries "" for the queue's default, else 0..1000; optionally
--               followed by ":<level>", the task's priority level: 0
--               normal (the same as none), 1 high, 2 low ("3:1", ":2";
--               see "Priorities" in docs/protocol.md), and then by "t"
--               when the payload starts with a W3C traceparent, 55
--               bytes that are not counted as payload (":0t"; see
--               "Traces" in docs/protocol.md)
--   timeout ms  "" for the queue's default, else 1..9999999999
--   payload     opaque bytes
--
-- Returns, per task, three values {code, due_ms, detail}:
--   { 1, due, ""}            enqueued
--   { 0, due or -1, state}   duplicate: the id is live; nothing changed
--   {-1, 0, queue}           unknown queue, or a removed queue (its policy
--                            is "drain|..."; it takes no new tasks)
--   {-2, 0, max_payload}     payload larger than the queue allows
--   {-3, 0, message}         invalid argument
-- or, for the whole call, the error "TRYAGAIN ..." with nothing written,
-- while the shard's slot is being migrated between Redis Cluster nodes and
-- a bucket list the call would push to is not on this node: send the call
-- again (after a short wait).
--
-- The helpers between the two lines below are lib.lua's, copied so that
-- this file runs on its own; luascript checks that they are (edit
-- lib.lua, then `go generate ./internal/shard` copies them here).
-- @lib: begin
-- served_here checks that this node serves keys, the keys a script builds
-- from ARGV prefixes and task data (ready lists, pending sets, far-tier
-- bucket lists) instead of taking them in KEYS. A script calls it before
-- its first write (fence's store of a newer epoch aside: a retry stores
-- the same) and, when it returns an error reply, returns that at once:
-- "TRYAGAIN ...", nothing written. Callers retry it (go-redis does, a few
-- times; then the caller's own loop).
--
-- Why: Redis Cluster checks a script's declared keys before running it,
-- but an undeclared key only when a command touches it. While the shard's
-- slot migrates (docs/protocol.md, "Slot migrations"), a key that has
-- already moved fails that command in the middle of the script, and the
-- writes made before it stay; on the importing node, which runs the
-- script once all its declared keys have moved (ASK), a key not moved
-- yet reads as empty, and a write to it creates a second copy.
--
-- How: one EXISTS over anchor (a key in KEYS) and keys. A multi-key
-- command is served while the slot migrates only by a node that has every
-- one of its keys; otherwise the script's command fails with "non local
-- key" (caught here by pcall). Outside a migration it is always served.
-- Declaring the keys instead would change the scripts' KEYS, which
-- producers and consumers in other languages pass, and move.lua learns
-- its queues only from the task data. One read per call, over each
-- distinct key once; a key that exists nowhere (an empty list) cannot be
-- told from one not moved yet, so such a call waits for the end of the
-- migration, as one whose declared key is missing does.
local function served_here(anchor, keys)
  for i = 1, #keys, 1000 do
    local r = redis.pcall("EXISTS", anchor, unpack(keys, i, math.min(i + 999, #keys)))
    if type(r) == "table" and r.err then
      if string.find(r.err, "non local key", 1, true) then
        return redis.error_reply("TRYAGAIN keys of this shard are being migrated between cluster nodes; nothing was written")
      end
      return redis.error_reply(r.err)
    end
  end
  return nil
end

-- queue_names returns the memo that header, decode and blob_queue read
-- interned queue names through (task data version 2): key is any key of
-- the shard, whose hash tag names the shard's queues hash. A script makes
-- one per call and passes it along; each name is read once per call.
local function queue_names(key)
  return {key = (string.match(key, "^{[^}]*}") or "") .. ":queues"}
end

-- queues_here fails the call with TRYAGAIN when the shard's queues hash
-- is not on this node: it exists in every registered shard, so its slot
-- is being migrated and the hash has not arrived yet, or has left, or
-- the registry was lost (the schedulers write it again within a
-- minute). queue_name checks it when a name is missing; a script whose
-- writes come before a name read calls it before its first write, so
-- that the call fails having written nothing, and the caller retries
-- it. One EXISTS per call at most.
local function queues_here(qn)
  if not qn.here then
    if redis.pcall("EXISTS", qn.key) ~= 1 then
      error({err = "TRYAGAIN the shard's queues hash is not on this node (its slot is migrating, or the registry was lost and is being written again); nothing was written"})
    end
    qn.here = true
  end
end

-- queue_name returns the name of queue number qid from the shard's queues
-- hash (field "|q|<qid>", written by the registration that interned the
-- queue), or nil when the shard has no queue of that number (the data is
-- corrupt). Without the hash the call fails (queues_here). Every script
-- reads its task data, and so the names, before it writes, or calls
-- queues_here first.
local function queue_name(qn, qid)
  local n = qn[qid]
  if n == nil then
    local r = redis.pcall("HGET", qn.key, "|q|" .. qid)
    if type(r) == "table" and r.err then r = nil end
    if not r then
      qn.here = false
      queues_here(qn)
    end
    n = r or false
    qn[qid] = n
  end
  return n or nil
end

-- prio_split splits a task data's max_retries field into the task's max
-- retries, its priority level (docs/fairness.md, "Priorities") and its
-- trace flag (docs/protocol.md, "Traces"): the field holds
-- 16384 * level + 8192 * traced + max retries (at most 1000), level 0
-- normal, 1 high, 2 low (a corrupt field above 2 reads as 0), so that the
-- level and the trace context travel with the task data through retries,
-- changes, exports and replays.
local function prio_split(mr)
  local level = math.floor(mr / 16384)
  if level > 2 then level = 0 end -- corrupt: read as normal
  return mr % 8192, level, math.floor(mr / 8192) % 2
end

-- v2_fields reads the fixed header of task data version 2 after its
-- first byte (2): the interned queue number, attempts, max_retries,
-- timeout_ms, due_ms and enqueued_ms, big-endian, 23 bytes (the payload
-- starts at byte 25); nothing when blob is shorter.
local function v2_fields(blob)
  if #blob < 24 then return end
  return struct.unpack(">I2I2I2I5I6I6", blob, 2)
end

-- header reads the fields of encoded task data (version 1 or 2, the
-- queue of version 2 read through qn, see queue_names) as text: queue,
-- attempts, max_retries, timeout_ms, due_ms, enqueued_ms, and the
-- position of the payload; nil when blob (may be nil or false) is not
-- such data. The scripts read task data through it, decode and
-- blob_queue, so that the encodings are read in one place.
local function header(blob, qn)
  if not blob then return nil end
  if string.byte(blob, 1) == 2 then
    local qid, att, mr, to, due, enq = v2_fields(blob)
    local q = qid and queue_name(qn, qid)
    if not q then return nil end
    return q, string.format("%d", att), string.format("%d", (prio_split(mr))), string.format("%d", to),
      string.format("%d", due), string.format("%d", enq), 25
  end
  local q, att, mr, to, due, enq, pos = string.match(blob, "^1|([^|]+)|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|()")
  if q then mr = string.format("%d", (prio_split(tonumber(mr)))) end
  return q, att, mr, to, due, enq, pos
end
-- @lib: end

local first = 1 -- the wake channel's argument
if string.sub(ARGV[1] or "", 1, 1) == "@" then
  local mine = tonumber(string.sub(ARGV[1], 2))
  local marker = KEYS[6] and redis.call("GET", KEYS[6])
  if not mine then
    return redis.error_reply("enqueue: invalid layout generation " .. ARGV[1])
  end
  if marker then
    local g, n, f = string.match(marker, "^(%d+)|(%d+k?)|(%d+k?)$")
    if g and tonumber(g) > mine then
      if n == "0" then
        return redis.error_reply("TRYAGAIN the shard count is changing; nothing was written")
      end
      return redis.error_reply("LAYOUT " .. g .. " " .. n .. " " .. f)
    end
  end
  first = 2
end
if (#ARGV - first) % 6 ~= 0 or #ARGV < first + 6 then
  return redis.error_reply("enqueue: want a wake channel and 6 arguments per task")
end

local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_s = string.format("%d", now)
local enq_tail = "|" .. now_s .. "|" -- "|enqueued_ms|" in each encoded task
local entry_tail = "|" .. now_s -- a far-tier entry is "id|enqueued_ms"
local earliest = nil -- earliest due (or promotion) time this call stores

-- The far tier: read once per call, and only for a task due more than a
-- second ahead. far_lists holds this call's entries per bucket.
local far -- nil: not read yet; false: off
local function far_tier()
  if far == nil then
    far = false
    if KEYS[4] then
      local b, l = string.match(redis.call("HGET", KEYS[3], "|far") or "", "^(%d+)|(%d+)$")
      if b and tonumber(b) > 0 then far = {bucket = tonumber(b), lead = tonumber(l)} end
    end
  end
  return far
end
local far_lists, far_order = {}, {}
local stored = {} -- tasks stored by this call, per queue
local live = {} -- ids stored before this call
local taken = {} -- id -> due time, of the tasks this call stores
local new_tasks = {} -- HSET arguments: id, encoded task, ...
local scheduled = {} -- ZADD arguments: due_ms, id, ...

-- parse_due returns a due argument's time in ms and as written, or nil
-- and why it is invalid.
local function parse_due(due_arg)
  if string.sub(due_arg, 1, 1) == "+" then
    local delay = string.match(due_arg, "^%+(%d+)$")
    if not delay or #delay > 12 then return nil, "invalid delay (0..999999999999 ms)" end
    local due = now + tonumber(delay)
    return due, string.format("%d", due)
  end
  if #due_arg > 13 or not string.match(due_arg, "^%d+$") then
    return nil, "invalid due time (unix ms, at most 13 digits)"
  end
  return tonumber(due_arg), due_arg
end

-- far_bucket returns the start of the far-tier bucket (as written) that a
-- task due at due goes to, or nil when it goes to KEYS[1]. A call's tasks
-- share a few buckets: each bucket's text is formatted once.
local bucket_text = {}
local function far_bucket(due)
  local ft = due - now > 1000 and far_tier()
  local bucket = ft and due - due % ft.bucket
  if not bucket or bucket - ft.lead <= now then return nil end
  local b = bucket_text[bucket]
  if not b then
    b = string.format("%d", bucket)
    bucket_text[bucket] = b
  end
  return b
end

-- Each task's due time is parsed, and its bucket found, once, here: as a
-- number (false when invalid), as written (or why it is invalid), and its
-- bucket (false: KEYS[1]), by the task's place in ARGV.
local dues, due_texts, buckets = {}, {}, {}
for i = first + 2, #ARGV, 6 do
  local due, text = parse_due(ARGV[i])
  dues[i], due_texts[i] = due or false, text
  buckets[i] = due and far_bucket(due) or false
end

-- The bucket lists are not in KEYS (their names follow from due times).
-- While the shard's slot is being migrated between Redis Cluster nodes, a
-- list already moved would fail the RPUSH below after the tasks were
-- stored (they would be in no bucket, never due), and on the importing
-- node a list not moved yet would be created a second time. So before
-- anything is written, served_here checks every list this call may push
-- to (docs/protocol.md, "Slot migrations").
if KEYS[4] then
  local lists, seen = {}, {}
  for i = first + 2, #ARGV, 6 do
    local b = buckets[i]
    if b and not seen[b] then
      seen[b] = true
      lists[#lists + 1] = KEYS[4] .. ":" .. b
    end
  end
  local moving = served_here(KEYS[1], lists)
  if moving then return moving end
end

-- valid_id reports whether id is a legal task id: 1..256 bytes of UTF-8
-- (no overlong form, surrogate or code point above U+10FFFF) without "|"
-- and without a control character (C0, DEL, C1). Go's shard.ValidID is
-- the same rule. An id of printable ASCII is settled by one find.
local function valid_id(id)
  local n = #id
  if n == 0 or n > 256 then return false end
  if not string.find(id, "[^ -{}~]") then return true end
  local i = 1
  while i <= n do
    local c = string.byte(id, i)
    local len, lo, hi = 1, 0x80, 0xBF
    if c < 0x20 or c == 0x7C or c == 0x7F then return false
    elseif c < 0x80 then len = 1
    elseif c == 0xC2 then len, lo = 2, 0xA0 -- C2 80..9F are the C1 controls
    elseif c >= 0xC3 and c <= 0xDF then len = 2
    elseif c == 0xE0 then len, lo = 3, 0xA0
    elseif c == 0xED then len, hi = 3, 0x9F
    elseif c >= 0xE1 and c <= 0xEF then len = 3
    elseif c == 0xF0 then len, lo = 4, 0x90
    elseif c >= 0xF1 and c <= 0xF3 then len = 4
    elseif c == 0xF4 then len, hi = 4, 0x8F
    else return false end
    if i + len - 1 > n then return false end
    for k = i + 1, i + len - 1 do
      local b = string.byte(id, k)
      if b < lo or b > hi then return false end
      lo, hi = 0x80, 0xBF
    end
    i = i + len
  end
  return true
end

-- policy returns a queue's policy, read and parsed once per call: false
-- for an unknown or removed queue (its policy is "drain|..."), else a
-- table with the defaults (as written) and max_payload (as written and as
-- a number); max_payload is nil when the policy is corrupt.
--
-- The queue's interned number (field "|id|<queue>", set by the
-- registration once every process of the namespace reads task data
-- version 2) is read with it: with one, tasks are written in version 2.
local policies = {}
local function policy(queue)
  local p = policies[queue]
  if p == nil then
    local reg = redis.call("HMGET", KEYS[3], queue, "|id|" .. queue)
    local text = reg[1]
    p = false
    if text and string.sub(text, 1, 6) ~= "drain|" then
      local r, t, m = string.match(text, "^(%d+)|(%d+)|(%d+)")
      local qid = tonumber(reg[2])
      if qid and (qid < 1 or qid > 65535 or qid ~= math.floor(qid)) then qid = nil end
      p = {retries = r, timeout = t, max_payload = m, max_len = tonumber(m), qid = qid}
    end
    policies[queue] = p
  end
  return p
end

-- enqueue stores the task whose arguments start at ARGV[i].
local function enqueue(i)
  local id, queue, retries, timeout, payload = ARGV[i], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5]
  if not valid_id(id) then
    return -3, 0, "invalid task id (1..256 bytes of UTF-8 without \"|\" or control characters)"
  end
  local p = policy(queue)
  if not p then
    return -1, 0, queue
  end
  if not p.max_payload then
    return -3, 0, "corrupt queue policy for " .. queue
  end
  -- A traceparent before the payload (the "t" below) is not counted.
  if #payload > p.max_len and (string.sub(retries, -1) ~= "t" or #payload - 55 > p.max_len) then
    return -2, 0, p.max_payload
  end
  -- Numbers are bounded so that they stay exact in Lua and in every reader.
  local level, traced = 0, ""
  local r, l, tr = string.match(retries, "^(%d*):([012])(t?)$")
  if r then retries, level, traced = r, tonumber(l), tr end
  if retries == "" then retries = p.retries end
  if not string.match(retries, "^%d%d?%d?%d?$") or (#retries == 4 and tonumber(retries) > 1000) then
    return -3, 0, "invalid max retries (0..1000, optionally followed by :0, :1 or :2, the priority level, and t)"
  end
  if traced == "t" then
    -- The payload starts with a W3C traceparent; the slot for the span id
    -- of a failed attempt goes after it (lib.lua's trace_len).
    local x = "[0-9a-f]"
    local h = string.rep(x, 8)
    if not string.match(string.sub(payload, 1, 55), "^" .. x .. x .. "%-" .. h .. h .. h .. h .. "%-" .. h .. h .. "%-" .. x .. x .. "$") then
      return -3, 0, "invalid trace context (the payload must start with a W3C traceparent, 55 bytes)"
    end
    payload = string.sub(payload, 1, 55) .. "-0000000000000000" .. string.sub(payload, 56)
  end
  -- The level and the trace flag are kept in the max_retries field
  -- (lib.lua's prio_split).
  local flags = 16384 * level + (traced == "t" and 8192 or 0)
  if flags > 0 then retries = string.format("%d", tonumber(retries) + flags) end
  if timeout == "" then timeout = p.timeout end
  if #timeout > 10 or not string.match(timeout, "^0*[1-9]%d*$") then
    return -3, 0, "invalid timeout (1..9999999999 ms)"
  end
  local due, due_s = dues[i + 1], due_texts[i + 1]
  if not due then return -3, 0, due_s end
  if taken[id] then -- stored earlier in this call
    return 0, taken[id], "scheduled"
  end
  if live[id] then
    local score = tonumber(redis.call("ZSCORE", KEYS[1], id))
    if not score then -- in the far tier, or ready, running or dead
      local _, _, _, _, d = header(redis.call("HGET", KEYS[2], id), queue_names(KEYS[2]))
      d = tonumber(d)
      if d and d > now then score = d end
    end
    if score then return 0, score, "scheduled" end
    return 0, -1, "ready"
  end
  taken[id] = due
  new_tasks[#new_tasks + 1] = id
  if p.qid then
    -- Version 2: byte 2, then queue number, attempts, max_retries,
    -- timeout_ms, due_ms and enqueued_ms, big-endian (2, 2, 2, 5, 6 and 6
    -- bytes), then the payload.
    new_tasks[#new_tasks + 1] = "\2" .. struct.pack(">I2I2I2I5I6I6", p.qid, 0,
      tonumber(retries), tonumber(timeout), due, now) .. payload
  else
    -- Version 1:
    -- 1|queue|attempts|max_retries|timeout_ms|due_ms|enqueued_ms|payload
    new_tasks[#new_tasks + 1] = "1|" .. queue .. "|0|" .. retries .. "|" ..
        timeout .. "|" .. due_s .. enq_tail .. payload
  end
  stored[queue] = (stored[queue] or 0) + 1
  local b = buckets[i + 1]
  if b then
    local l = far_lists[b]
    if not l then
      l = {}
      far_lists[b] = l
      far_order[#far_order + 1] = b
    end
    l[#l + 1] = id .. entry_tail
  else
    scheduled[#scheduled + 1] = due_s
    scheduled[#scheduled + 1] = id
    if earliest == nil or due < earliest then earliest = due end
  end
  return 1, due, ""
end

-- One HMGET tells which ids are live; the tasks stored are written with
-- one HSET and one ZADD per 500 tasks after the loop, not two commands
-- each. (HMGET also returns the live tasks' data: for a call of
-- duplicates, at most as much as the call's own arguments, per chunk.)
local ids = {}
for i = first + 1, #ARGV, 6 do ids[#ids + 1] = ARGV[i] end
for i = 1, #ids, 1000 do
  local found = redis.call("HMGET", KEYS[2], unpack(ids, i, math.min(i + 999, #ids)))
  for j = 1, #found do
    if found[j] then live[ids[i + j - 1]] = true end
  end
end
local out = {}
for i = first + 1, #ARGV, 6 do
  local code, due, detail = enqueue(i)
  out[#out + 1] = code
  out[#out + 1] = due
  out[#out + 1] = detail
end
for i = 1, #new_tasks, 1000 do
  redis.call("HSET", KEYS[2], unpack(new_tasks, i, math.min(i + 999, #new_tasks)))
end
for i = 1, #scheduled, 1000 do
  redis.call("ZADD", KEYS[1], unpack(scheduled, i, math.min(i + 999, #scheduled)))
end
for _, b in ipairs(far_order) do
  local p = tonumber(b) - far.lead
  local promote = string.format("%d", p)
  redis.call("ZADD", KEYS[4], "NX", promote, b)
  local l = far_lists[b]
  for i = 1, #l, 1000 do
    redis.call("RPUSH", KEYS[4] .. ":" .. b, unpack(l, i, math.min(i + 999, #l)))
  end
  -- "|far" is a wake candidate only when this call moved it earlier.
  if redis.call("ZADD", KEYS[1], "LT", "CH", promote, "|far") == 1 then
    if earliest == nil or p < earliest then earliest = p end
  end
end
if KEYS[5] then
  for q, n in pairs(stored) do
    redis.call("HINCRBY", KEYS[5], "s|" .. q, n)
  end
end
-- Wake the owner when nothing in KEYS[1] is due before this call's
-- earliest member: it is the new head, or tied with the old one (a
-- needless wake-up, never a missed one). ZCOUNT answers with an integer;
-- reading the head's score would format a double and parse it back.
if earliest ~= nil then
  local e = string.format("%d", earliest)
  if redis.call("ZCOUNT", KEYS[1], "-inf", "(" .. e) == 0 then
    redis.call("SPUBLISH", ARGV[first], e)
  end
end
return out
