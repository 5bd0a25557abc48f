-- lib.lua: helpers of the scripts. luascript prepends to each script only
-- those it uses; a script that runs on its own (enqueue.lua) carries a
-- copy of those it uses, which luascript checks against this file
-- (`go generate ./internal/shard` rewrites the copies).
-- It defines functions only and touches no key by itself.

-- now_ms returns Redis server time in unix milliseconds.
local function now_ms()
  local t = redis.call("TIME")
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

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

-- trace_len is the length of the trace context that starts the payload
-- area of traced task data (prio_split): a W3C traceparent (55 bytes),
-- "-" and the span id of the last failed attempt in 16 hex digits
-- ("0000000000000000" before one failed).
local function trace_len()
  return 72
end

-- v2_fields reads the fixed header of task data version 2 after its
-- first byte (2): the interned queue number, attempts, max_retries,
-- timeout_ms, due_ms and enqueued_ms, big-endian, 23 bytes (the payload
-- starts at byte 25); nothing when blob is shorter.
local function v2_fields(blob)
  if #blob < 24 then return end
  return struct.unpack(">I2I2I2I5I6I6", blob, 2)
end

-- traced_at sets t.tctx to the trace context that starts the payload
-- area of blob when traced is 1 (prio_split) and moves t.pos past it, so
-- that string.sub(blob, t.pos) is the payload alone. Data flagged but
-- without a context of that length and shape (its dashes where a
-- traceparent and the link slot have them: a hand edit) is read, and
-- rewritten, as untraced with its whole payload, as Go's splitTrace
-- reads it. It returns t.
local function traced_at(t, blob, traced)
  local p = t.pos
  if traced == 1 and #blob >= p + trace_len() - 1 and string.byte(blob, p + 2) == 45 and
      string.byte(blob, p + 35) == 45 and string.byte(blob, p + 52) == 45 and string.byte(blob, p + 55) == 45 then
    t.tctx = string.sub(blob, p, p + trace_len() - 1)
    t.pos = p + trace_len()
    t.traced = 1
  else
    t.traced = 0
  end
  return t
end

-- decode parses encoded task data, version 1 or 2 (docs/protocol.md), the
-- queue name of version 2 read through qn (queue_names). It returns nil
-- and a reason when blob is not a valid encoding.
--   1|queue|attempts|max_retries|timeout_ms|due_ms|enqueued_ms|payload
--   \2 qid(2) attempts(2) max_retries(2) timeout_ms(5) due_ms(6) enqueued_ms(6) payload
local function decode(blob, qn)
  if not blob then return nil, "no task data" end
  if string.byte(blob, 1) == 2 then
    local qid, att, mr, to, due, enq = v2_fields(blob)
    if not qid then return nil, "undecodable task data" end
    local q = queue_name(qn, qid)
    if not q then return nil, "unknown queue number " .. qid end
    local m, level, traced = prio_split(mr)
    return traced_at({v = 2, qid = qid, queue = q, attempts = att, max_retries = m, level = level,
      timeout = to, due = due, enqueued = enq, pos = 25}, blob, traced)
  end
  local v, q, att, mr, to, due, enq, pos = string.match(blob,
    "^(%d+)|([^|]+)|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|()")
  if not v then return nil, "undecodable task data" end
  if v ~= "1" then return nil, "unsupported task encoding version " .. v end
  local m, level, traced = prio_split(tonumber(mr))
  return traced_at({v = 1, queue = q, attempts = tonumber(att), max_retries = m, level = level,
    timeout = tonumber(to), due = tonumber(due), enqueued = tonumber(enq),
    pos = pos}, blob, traced)
end

-- fence checks the caller's epoch against the shard's stored one. A newer
-- epoch is stored (the first script a new owner runs records it); an older
-- one is counted in stats_key and rejected. Returns ok and, when not ok,
-- the stored epoch.
--
-- A stored epoch that is not a whole number (a hand edit, a corrupted
-- key) is corrupt: no owner can be compared with it, and refusing every
-- caller would leave the shard's tasks stuck. The caller's epoch
-- overwrites it, counted as "corrupt_epoch" in stats_key. An owner
-- fenced off since keeps its old epoch, so at most one stale call can
-- pass (it overwrites the garbage with its own, lower, epoch; the
-- current owner's next call stores its newer one and fences it off).
local function fence(epoch_key, stats_key, epoch_arg)
  local stored = redis.call("GET", epoch_key)
  if stored == epoch_arg then return true, stored end -- the usual case
  local epoch = tonumber(epoch_arg)
  local cur = tonumber(stored or "0")
  if not cur or cur ~= math.floor(cur) or cur < 0 or cur >= 9007199254740992 then
    redis.call("HINCRBY", stats_key, "corrupt_epoch", 1)
    redis.call("SET", epoch_key, epoch_arg)
    return true, epoch
  end
  if epoch < cur then
    redis.call("HINCRBY", stats_key, "stale_epoch", 1)
    return false, cur
  end
  if epoch > cur then
    redis.call("SET", epoch_key, epoch_arg)
  end
  return true, epoch
end

-- valid_due reports whether score (a number, or nil) is a due time: 0
-- up to the latest due time enqueue.lua accepts (13 digits of unix ms).
-- A delayed-set score outside that range (inf included) is a corrupt
-- due time: no enqueue, retry or import writes one, so it comes from a
-- hand edit or a broken producer.
local function valid_due(score)
  return score ~= nil and score >= 0 and score <= 9999999999999
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

-- blob_level returns the priority level of encoded task data
-- (prio_split), 0 when it has none or cannot be read.
local function blob_level(blob)
  if not blob then return 0 end
  if string.byte(blob, 1) == 2 then return math.floor((string.byte(blob, 6) or 0) / 64) end
  local mr = string.match(blob, "^1|[^|]+|%d+|(%d+)|")
  return mr and select(2, prio_split(tonumber(mr))) or 0
end

-- blob_queue returns the queue named by encoded task data (version 2:
-- through qn), or "" when there is none to read. Every count of a dead or
-- leased task uses it, so that the count taken when a task enters a state
-- is the one given back when it leaves.
local function blob_queue(blob, qn)
  if not blob then return "" end
  if string.byte(blob, 1) == 2 then
    local qid = v2_fields(blob)
    return qid and queue_name(qn, qid) or ""
  end
  return string.match(blob, "^1|([^|]+)|") or ""
end

-- count adds delta to the number of queue's tasks in one state, in the
-- shard's counts hash: field "<kind>|<queue>", kind "s" scheduled (the
-- far tier included), "l" leased, "d" dead. Ready tasks are not counted:
-- their lists and pending sets have lengths. A nil key does nothing.
local function count(counts_key, kind, queue, delta)
  if counts_key and delta ~= 0 then
    redis.call("HINCRBY", counts_key, kind .. "|" .. queue, delta)
  end
end

-- bury moves a task id to the dead-letter set with a reason, keeping its
-- data (if any) so it can be inspected and replayed, and counts it dead
-- in counts_key (may be nil) under queue, the queue of its data
-- (blob_queue).
local function bury(dead_key, info_key, id, now, reason, last_error, counts_key, queue)
  if redis.call("ZADD", dead_key, now, id) == 1 then
    count(counts_key, "d", queue, 1)
  end
  redis.call("HSET", info_key, id,
    cjson.encode({reason = reason, error = last_error or "", at = now}))
end

-- encode renders task fields, in the version they were decoded from
-- (t.v; version 2 with t.qid), with the payload of the original blob, or
-- with payload when it is given; t.level and the trace flag (prio_split)
-- are kept, and the trace context t.tctx goes before the payload.
local function encode(t, blob, payload)
  payload = (t.tctx or "") .. (payload or string.sub(blob, t.pos))
  local mr = t.max_retries + 16384 * (t.level or 0) + 8192 * (t.traced or 0)
  if t.v == 2 then
    return "\2" .. struct.pack(">I2I2I2I5I6I6", t.qid, t.attempts, mr,
      t.timeout, t.due, t.enqueued) .. payload
  end
  return "1|" .. t.queue .. "|" .. string.format("%d", t.attempts) .. "|" ..
    string.format("%d", mr) .. "|" .. string.format("%d", t.timeout) ..
    "|" .. string.format("%d", t.due) .. "|" .. string.format("%d", t.enqueued) ..
    "|" .. payload
end

-- backoff_ms is the retry delay after the given failed attempt (1-based):
-- min(cap, base * factor^(attempt-1)), with "equal jitter": half of it
-- fixed, half scaled by rnd in [0,1). spec is "base_ms|cap_ms|factor";
-- missing or malformed specs use 1000|3600000|2.
local function backoff_ms(spec, attempt, rnd)
  local base, cap, factor = 1000, 3600000, 2
  if spec then
    local b, c, f = string.match(spec, "^(%d+)|(%d+)|([%d%.]+)$")
    if b then base, cap, factor = tonumber(b), tonumber(c), tonumber(f) end
  end
  local d = base * (factor ^ (attempt - 1))
  if d > cap then d = cap end
  return math.floor(d / 2 + rnd * d / 2)
end

-- policy_backoff extracts "base|cap|factor" from a queue policy
-- "max_retries|timeout_ms|max_payload|base|cap|factor".
-- A removed queue's policy keeps its backoff behind "drain|".
local function policy_backoff(policy)
  if not policy then return nil end
  return string.match(policy, "^%d+|%d+|%d+|(%d+|%d+|[%d%.]+)$") or
    string.match(policy, "^drain|%d+|%d+|%d+|(%d+|%d+|[%d%.]+)$")
end

-- schedule puts a task back in the delayed set at due, publishing the due
-- time on wake_channel when it becomes the earliest task.
local function schedule(delayed_key, wake_channel, id, due)
  local head = redis.call("ZRANGE", delayed_key, "0", "0", "WITHSCORES")
  local due_s = string.format("%d", due)
  redis.call("ZADD", delayed_key, due_s, id)
  if head[2] == nil or due < tonumber(head[2]) then
    redis.call("SPUBLISH", wake_channel, due_s)
  end
end

-- ready_pushed announces n entries just appended to ready list key, whose
-- length is now len: when the list was empty before, it SPUBLISHes n on
-- the shard channel named like the list. Workers on a Redis Cluster, which
-- cannot block on lists in several slots, wait for this (docs/protocol.md,
-- "Ready announcements"); a list that was not empty needs no announcement,
-- a worker pops it before it waits.
local function ready_pushed(key, len, n)
  if len == n then redis.call("SPUBLISH", key, string.format("%d", n)) end
end

-- make_ready appends "seq|id|blob" to a ready list and records id as
-- pending (ready, not yet leased) under that new sequence number. The
-- entry carries the task, so a worker can run it without another read.
-- Sequence numbers grow along the list, so a pending id whose number is
-- below the number of the list's head has been popped by a worker that has
-- not leased it (it runs it, leases it, or crashed). An entry whose number
-- is not the id's pending number is a leftover duplicate and is skipped.
-- A push that makes the list non-empty is announced on the shard channel
-- named like the list (see ready_pushed).
local function make_ready(seq_key, pending_key, ready_key, id, blob)
  local seq = string.format("%d", redis.call("INCR", seq_key))
  redis.call("ZADD", pending_key, seq, id)
  ready_pushed(ready_key, redis.call("RPUSH", ready_key, seq .. "|" .. id .. "|" .. blob), 1)
end

-- ready_entry splits a ready-list entry "seq|id|blob" (or "seq|id", the
-- form before entries carried the task) into its number, its id and the
-- number as written (the delivery token).
local function ready_entry(e)
  local seq, id = string.match(e or "", "^(%d+)|([^|]+)")
  return tonumber(seq), id, seq
end

-- popped reports whether the entry numbered seq has left the ready list
-- (popped by a worker): the list is empty or its head is numbered higher.
-- A head without a number (written by hand) proves nothing: not popped.
local function popped(ready_key, seq)
  if seq >= 1125899906842624 then return false end -- waiting (fair_wait_base)
  local head = redis.call("LINDEX", ready_key, 0)
  if not head then return true end
  local hs = ready_entry(head)
  return hs ~= nil and hs > seq
end

-- end_delivery ends the current delivery of id if token is its token:
-- either a leased one (token in leases_key) or one a worker runs without a
-- lease yet (id pending in pending_key under the number token, its entry
-- popped). pending_key may be nil: leased deliveries only. Returns
-- "pending" or "lease", the kind of delivery ended, or false, changing
-- nothing, when token is stale.
local function end_delivery(inflight_key, leases_key, pending_key, id, token)
  if pending_key then
    local s = redis.call("ZSCORE", pending_key, id)
    -- Redis writes an integral score as its digits, as the token is
    -- written: equal strings spare the parsing.
    if s and (s == token or tonumber(s) == tonumber(token)) then
      redis.call("ZREM", pending_key, id)
      return "pending"
    end
  end
  if redis.call("HGET", leases_key, id) ~= token then
    return false
  end
  redis.call("ZREM", inflight_key, id)
  redis.call("HDEL", leases_key, id)
  return "lease"
end

-- bulk runs cmd on key with args in chunks of at most 1000 arguments
-- (an even number, so ZADD score/member pairs stay together), keeping
-- within Lua's unpack limit however large the batch. It returns the last
-- chunk's reply (for RPUSH: the list's length after the whole batch).
local function bulk(cmd, key, args)
  local n, r = #args, nil
  for i = 1, n, 1000 do
    r = redis.call(cmd, key, unpack(args, i, math.min(i + 999, n)))
  end
  return r
end

-- bulk_read runs the read command cmd (HMGET, ZMSCORE) on key with args
-- in chunks of at most 1000 and returns the replies in order, one per
-- argument (false where Redis answered nil); none for no args.
local function bulk_read(cmd, key, args)
  local n = #args
  if n == 0 then return {} end
  if n <= 1000 then return redis.call(cmd, key, unpack(args)) end
  local out = {}
  for i = 1, n, 1000 do
    for _, v in ipairs(redis.call(cmd, key, unpack(args, i, math.min(i + 999, n)))) do
      out[#out + 1] = v
    end
  end
  return out
end

-- Fair queues (docs/fairness.md). A due task of a fair queue does not go
-- straight to the queue's ready list: it waits in its key's list,
-- "<tag>:fair:<queue>|<key>" (the key is the hash tag an id starts with,
-- "{key}rest"; "" for an id without one), and the key waits on the
-- queue's ring "<tag>:fair:<queue>" while its list has entries. The ready
-- list is then a short window that fair_refill fills from the keys in
-- weighted round-robin turns. A waiting task is pending under
-- fair_wait_base() + its sequence number, above every number a ready
-- entry gets: recovery never takes it for popped (lib.lua's popped), and
-- fair_refill gives it a new number when it enters the window.

-- fair_wait_base is 2^50, where waiting tasks' numbers start.
local function fair_wait_base()
  return 1125899906842624
end

-- fair_key returns the key of task id: the hash tag it starts with
-- ("{key}rest", key not empty), or "".
local function fair_key(id)
  if string.byte(id, 1) ~= 123 then return "" end
  local e = string.find(id, "}", 2, true)
  if not e or e < 3 then return "" end
  return string.sub(id, 2, e - 1)
end

-- fair_ring returns the ring of queue q of the shard of key (any key of
-- the shard; its hash tag names the shard).
local function fair_ring(key, q)
  return (string.match(key, "^{[^}]*}") or "") .. ":fair:" .. q
end

-- fair_parts returns the hash tag and the queue of a fair queue's ring.
local function fair_parts(ring)
  local tag = string.match(ring, "^{[^}]*}") or ""
  return tag, string.sub(ring, #tag + 7)
end

-- fair_sibling returns a key of a fair queue's state beside its ring:
-- kind "w" its weights, "t" its turn, "p" its parked keys, "c" its keys'
-- own concurrency caps, "q" their own rates, "b" its keys held at their
-- cap or out of tokens, "v" its keys' turns between priority levels
-- (fair_levels_pop), "r" the prefix of its keys' permit sets
-- ("<tag>:fairr:<q>|<key>", not declared) and "s" of their token buckets
-- ("<tag>:fairs:<q>|<key>", not declared).
local function fair_sibling(ring, kind)
  local tag, q = fair_parts(ring)
  return tag .. ":fair" .. kind .. ":" .. q
end

-- fair_state appends to list the keys of a fair queue's state (the ring
-- and its siblings), for served_here.
local function fair_state(ring, list)
  list[#list + 1] = ring
  for _, kind in ipairs({"w", "t", "p", "c", "b", "q", "v"}) do list[#list + 1] = fair_sibling(ring, kind) end
  list[#list + 1] = fair_parts(ring) .. ":inflight" -- read by fair_room
  list[#list + 1] = fair_parts(ring) .. ":fairwake" -- written by fair_hold
end

-- Priorities (docs/fairness.md, "Priorities"): a key's tasks of level 0
-- (normal) wait in its list "<ring>|<key>", those of level 1 (high) and
-- 2 (low) in "<ring>|<key>|1" and "<ring>|<key>|2". A key with a task of
-- another level than normal waiting has a field in "v" (its stride
-- state); a key without one has only its one list, read as before.

-- fair_list returns key k's list of level lvl (0 or nil: normal).
local function fair_list(ring, k, lvl)
  if lvl and lvl > 0 then return ring .. "|" .. k .. "|" .. string.format("%d", lvl) end
  return ring .. "|" .. k
end

-- fair_lists appends key k's lists of levels 1 and 2 to list when the
-- queue has keys with levels (vkey exists), for served_here.
local function fair_lists(ring, k, list, leveled)
  if leveled then
    list[#list + 1] = fair_list(ring, k, 1)
    list[#list + 1] = fair_list(ring, k, 2)
  end
end

-- fair_len returns the number of key k's tasks waiting in its lists.
local function fair_len(ring, k)
  local n = redis.call("LLEN", ring .. "|" .. k)
  if redis.call("HEXISTS", fair_sibling(ring, "v"), k) == 1 then
    n = n + redis.call("LLEN", fair_list(ring, k, 1)) + redis.call("LLEN", fair_list(ring, k, 2))
  end
  return n
end

-- prio_stride is each level's stride: levels with tasks waiting get a
-- key's turns in the shares 16 (high) : 4 (normal) : 1 (low).
local function prio_stride(l)
  if l == 1 then return 1 end
  if l == 2 then return 16 end
  return 4
end

-- fair_levels_pop takes up to n entries of key k from its levels' lists
-- by stride scheduling. st is the key's state, "p0|p1|p2|vt": each
-- level's pass and the virtual time. The next entry comes from the level
-- with entries and the lowest pass (ties: high, normal, low), whose pass
-- then grows by its stride; a level that had none comes back at the
-- virtual time, without credit for the time it was empty. So a level
-- with tasks waiting gets at least its share of the key's entries, the
-- bound docs/fairness.md states. Returns the entries in that order and
-- the number left in the key's lists; the state is written back, or
-- dropped when none are left. A list not on this node returns its
-- error reply, nothing taken.
local function fair_levels_pop(ring, k, n, st)
  local vkey = fair_sibling(ring, "v")
  local a, b, c, d = string.match(st, "^(%d+)|(%d+)|(%d+)|(%d+)$")
  local p = {[0] = tonumber(a) or 0, [1] = tonumber(b) or 0, [2] = tonumber(c) or 0}
  local vt = tonumber(d) or 0
  local len = {}
  for l = 0, 2 do
    local r = redis.pcall("LLEN", fair_list(ring, k, l))
    if type(r) == "table" then return r end
    len[l] = r
    if r > 0 and p[l] < vt then p[l] = vt end
  end
  local take, order = {[0] = 0, [1] = 0, [2] = 0}, {}
  for i = 1, n do
    local best
    for _, l in ipairs({1, 0, 2}) do
      if len[l] > take[l] and (not best or p[l] < p[best]) then best = l end
    end
    if not best then break end
    vt = p[best]
    p[best] = p[best] + prio_stride(best)
    take[best] = take[best] + 1
    order[i] = best
  end
  local got = {}
  for l = 0, 2 do
    got[l] = take[l] > 0 and redis.call("LPOP", fair_list(ring, k, l), take[l]) or {}
  end
  local out, at = {}, {[0] = 1, [1] = 1, [2] = 1}
  for _, l in ipairs(order) do
    local e = got[l][at[l]]
    at[l] = at[l] + 1
    if e then out[#out + 1] = e end
  end
  local left = len[0] + len[1] + len[2] - #out
  if left > 0 then
    redis.call("HSET", vkey, k, string.format("%d|%d|%d|%d", p[0], p[1], p[2], vt))
  else
    redis.call("HDEL", vkey, k)
  end
  return out, left
end

-- Per-key concurrency caps (docs/fairness.md, "Limits per key"). A key
-- of a fair queue holds a permit for each of its tasks from the moment
-- the task enters the window until it is settled: its id is in the key's
-- permit set while it is pending (in the window, or popped and not
-- leased) or leased (in flight). The set is pruned of ids that are
-- neither when it looks full, so a permit is never lost to a missed
-- release: it ends with the task's lease (recovery takes an expired one
-- back). A worker's settle releases its permit at once (fair_release).
-- A key at its cap leaves the ring for the set of held keys ("b"), its
-- tasks waiting in its list, unclaimed; fair_unblock puts it back when a
-- permit frees. A permit set expires a week after its last permit was
-- taken: what a lost release leaves of a key never seen again.

-- fair_caps returns the caps of fair queue q's keys in the shard of
-- ring: {default, own} with default the queues hash's field "|kcap|<q>"
-- (0: none) and own whether some key has a cap of its own ("c"); nil
-- when none of that field, "|kcapo|<q>" (some key was given a cap of
-- its own, ever), "|krate|<q>" (a default rate per key) and "|krateo|<q>"
-- (some key was given a rate of its own) is set: a queue whose keys were
-- never limited pays one HMGET a refill. The second value is the field
-- "|lvl|<q>": some task of the queue waited with a level other than
-- normal, ever (fair_wait), so that keys may have levels' lists.
local function fair_caps(ring, q)
  local tag = fair_parts(ring)
  local f = redis.call("HMGET", tag .. ":queues", "|kcap|" .. q, "|kcapo|" .. q, "|krate|" .. q, "|krateo|" .. q, "|lvl|" .. q)
  if not f[1] and not f[2] and not f[3] and not f[4] then return nil, f[5] end
  local own = f[2] and redis.call("EXISTS", fair_sibling(ring, "c")) == 1
  local own_rate = f[4] and redis.call("EXISTS", fair_sibling(ring, "q")) == 1
  local caps = {default = tonumber(f[1] or "") or 0, own = own, rate = f[3], own_rate = own_rate}
  if f[3] or own_rate then
    local t = redis.call("TIME")
    caps.now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return caps, f[5]
end

-- Rates per key: "<rate>|<period_ms>|<burst>[|<kind>]" (the queue's
-- default "|krate|<q>", a key's own in "<tag>:fairq:<q>", "0" for none),
-- kind "t" a token bucket (GCRA; the default), "l" a leaky bucket (the
-- same with a burst of 1: evenly spaced), "f" a fixed window (at most
-- rate in each period, windows aligned on the epoch), "s" a sliding
-- window (at most rate in any period: a log). The state is in the key
-- "<tag>:fairs:<q>|<key>" (t, l: the theoretical arrival time in µs),
-- or that key followed by "|f" (f: "window_start_us|count") or "|w" (s:
-- a ZSET of the admissions' times in µs); each expires when it no
-- longer limits anything. A key out of tokens is held like a key at its
-- cap, and its member "<q>|<key>" of the shard's "<tag>:fairwake",
-- scored by the time its next token comes, wakes the shard's mover then
-- (fair_hold; move.lua), which puts the key back and refills the window.

-- fair_spec returns key k's rate spec under caps (fair_caps): its own,
-- else the queue's default (the tasks without a key: only their own), or
-- nil; read once per call (caps.specs).
local function fair_spec(ring, caps, k)
  if not caps.rate and not caps.own_rate then return nil end
  caps.specs = caps.specs or {}
  local spec = caps.specs[k]
  if spec == nil then
    spec = k ~= "" and caps.rate or false
    if caps.own_rate then spec = redis.call("HGET", fair_sibling(ring, "q"), k) or spec end
    caps.specs[k] = spec
  end
  return spec or nil
end

-- fair_buckets appends to list, for served_here, the key of key k's rate
-- state under caps (that of its limiter's kind; caps nil: of every
-- kind, for a caller that has not read the caps).
local function fair_buckets(ring, caps, k, list)
  local key = fair_sibling(ring, "s") .. "|" .. k
  if not caps then
    list[#list + 1] = key
    list[#list + 1] = key .. "|f"
    list[#list + 1] = key .. "|w"
    return
  end
  local spec = fair_spec(ring, caps, k)
  if not spec then return end
  local kind = string.match(spec, "^%d+|%d+|%d+|(%a)$")
  if kind == "f" then key = key .. "|f" elseif kind == "s" then key = key .. "|w" end
  list[#list + 1] = key
end

-- fair_rate returns key k's limiter, or nil without a rate: its kind,
-- its state's key and, for a bucket, its emission interval and burst
-- tolerance in µs, for a window its rate and period in µs.
local function fair_rate(ring, caps, k)
  local spec = fair_spec(ring, caps, k)
  if not spec then return nil end
  local r, p, b, kind = string.match(spec, "^(%d+)|(%d+)|(%d+)|?(%a?)$")
  r, p, b = tonumber(r), tonumber(p), tonumber(b)
  if not r or r <= 0 or not p or p <= 0 then return nil end
  local key = fair_sibling(ring, "s") .. "|" .. k
  if kind == "f" then return {kind = "f", rate = r, p = p * 1000, key = key .. "|f"} end
  if kind == "s" then return {kind = "s", rate = r, p = p * 1000, key = key .. "|w"} end
  if kind == "l" then b = 1 end
  -- Whole µs: the arithmetic below stays exact (a burst is not lost to
  -- a quotient just under a whole number).
  local t = math.max(math.floor(p * 1000 / r + 0.5), 1)
  return {kind = "t", t = t, tau = math.max(b - 1, 0) * t, key = key}
end

-- fair_window_count returns fixed window b's start and the admissions
-- counted in it so far.
local function fair_window_count(b, now_us)
  local w0 = now_us - now_us % b.p
  local s0, c = string.match(redis.call("GET", b.key) or "", "^(%d+)|(%d+)$")
  if tonumber(s0) ~= w0 then c = 0 end
  return w0, tonumber(c) or 0
end

-- fair_tokens returns how many tokens limiter b (fair_rate) has now, at
-- most limit, and, with none, the time in ms its next one comes.
local function fair_tokens(b, now_us, limit)
  if b.kind == "f" then
    local w0, c = fair_window_count(b, now_us)
    if c < b.rate then return math.min(b.rate - c, limit), nil end
    return 0, math.ceil((w0 + b.p) / 1000)
  elseif b.kind == "s" then
    redis.call("ZREMRANGEBYSCORE", b.key, "-inf", string.format("%d", now_us - b.p))
    local c = redis.call("ZCARD", b.key)
    if c < b.rate then return math.min(b.rate - c, limit), nil end
    -- The oldest admission leaves the window a period after it.
    local oldest = redis.call("ZRANGE", b.key, 0, c - b.rate, "WITHSCORES")
    return 0, math.ceil((tonumber(oldest[#oldest]) + b.p + 1) / 1000)
  end
  local tat = math.max(tonumber(redis.call("GET", b.key) or "") or 0, now_us)
  local n = math.floor((b.tau - (tat - now_us)) / b.t) + 1
  if n >= 1 then return math.min(n, limit), nil end
  return 0, math.ceil((tat - b.tau) / 1000)
end

-- fair_take takes n tokens of limiter b.
local function fair_take(b, now_us, n)
  if b.kind == "f" then
    local w0, c = fair_window_count(b, now_us)
    redis.call("SET", b.key, string.format("%d|%d", w0, c + n), "PX", math.ceil((w0 + b.p - now_us) / 1000) + 1000)
    return
  elseif b.kind == "s" then
    local c = redis.call("ZCARD", b.key)
    local z = {}
    for i = 1, n do
      z[#z + 1] = string.format("%d", now_us)
      z[#z + 1] = string.format("%d:%d", now_us, c + i)
    end
    bulk("ZADD", b.key, z)
    redis.call("PEXPIRE", b.key, math.ceil(b.p / 1000) + 1000)
    return
  end
  local tat = math.max(tonumber(redis.call("GET", b.key) or "") or 0, now_us) + n * b.t
  redis.call("SET", b.key, string.format("%d", math.ceil(tat)), "PX", math.ceil((tat - now_us) / 1000) + 1000)
end

-- fair_hold holds key k of fair queue q off the ring ("b"); when its
-- bucket b has no token left, the member "<q>|<k>" of the shard's
-- "<tag>:fairwake", scored by the time the next one comes (the earlier of
-- two), makes the mover put it back then (move.lua); the queues hash's
-- field "|fwnext" holds the earliest such time, which the mover reports
-- with each call, and a wake-up on the shard's channel tells the mover
-- of an earlier one.
local function fair_hold(ring, k, b, now_us)
  redis.call("SADD", fair_sibling(ring, "b"), k)
  if not b then return end
  local n, wake = fair_tokens(b, now_us, 1)
  if n > 0 then return end
  local tag, q = fair_parts(ring)
  local at = string.format("%d", wake)
  redis.call("ZADD", tag .. ":fairwake", "LT", at, q .. "|" .. k)
  local cur = tonumber(redis.call("HGET", tag .. ":queues", "|fwnext") or "")
  if not cur or wake < cur then
    redis.call("HSET", tag .. ":queues", "|fwnext", at)
    redis.call("SPUBLISH", tag .. ":wake", at)
  end
end

-- fair_room returns how many more of key k's tasks may take a permit
-- under caps (fair_caps; nil: no caps), taken besides those the caller
-- took already (not in the permit set yet): math.huge without a cap or
-- rate; with a rate, at most the tokens the key has now, then its
-- bucket (fair_rate), and whether it has a cap (its permits are kept).
local function fair_room(ring, caps, k, pending_key, taken)
  if not caps then return math.huge end
  taken = taken or 0
  local room, b = math.huge, nil
  if caps.rate or caps.own_rate then
    b = fair_rate(ring, caps, k)
    if b then
      room = fair_tokens(b, caps.now_us, 1000000) - taken
      if room <= 0 then return 0, b end
    end
  end
  local cap = k ~= "" and caps.default or 0 -- the tasks without a key: only a cap of their own
  if caps.own then cap = tonumber(redis.call("HGET", fair_sibling(ring, "c"), k) or "") or cap end
  if cap <= 0 then return room, b, false end
  cap = cap - taken
  local rkey = fair_sibling(ring, "r") .. "|" .. k
  local n = redis.call("SCARD", rkey)
  if n < cap then return math.min(cap - n, room), b, true end
  local ids = redis.call("SMEMBERS", rkey)
  local ps = bulk_read("ZMSCORE", pending_key, ids)
  local ls = bulk_read("ZMSCORE", fair_parts(ring) .. ":inflight", ids)
  local gone = {}
  for j, id in ipairs(ids) do
    local p = ps[j] and tonumber(ps[j])
    if not ((p and p < fair_wait_base()) or ls[j]) then gone[#gone + 1] = id end
  end
  if #gone > 0 then bulk("SREM", rkey, gone) end
  return math.min(cap - (n - #gone), room), b, true
end

-- fair_unblock puts back on the ring each held key ("b") among keys (a
-- number n: up to n of them, at random) that has a permit free now, or
-- drops it from the held ones when its list is empty; a key still out of
-- tokens gets its wake-up (fair_hold). Returns the number put back.
local function fair_unblock(ring, keys, pending_key)
  local bkey = fair_sibling(ring, "b")
  if redis.call("EXISTS", bkey) == 0 then return 0 end
  local _, q = fair_parts(ring)
  local caps, lvl = fair_caps(ring, q)
  if type(keys) == "number" then keys = redis.call("SRANDMEMBER", bkey, keys) end
  local back = 0
  local vkey = fair_sibling(ring, "v")
  for _, k in ipairs(keys) do
    local list, rkey = ring .. "|" .. k, fair_sibling(ring, "r") .. "|" .. k
    -- Not declared: a key whose lists or permits are migrating waits.
    local own = {list, rkey, vkey}
    if caps then fair_buckets(ring, caps, k, own) end
    fair_lists(ring, k, own, lvl)
    if served_here(ring, own) then return back end
    if redis.call("SISMEMBER", bkey, k) == 1 then
      local free, b = fair_room(ring, caps, k, pending_key)
      if free > 0 then
        redis.call("SREM", bkey, k)
        if fair_len(ring, k) > 0 then
          redis.call("RPUSH", ring, k)
          back = back + 1
        elseif lvl then
          redis.call("HDEL", vkey, k) -- its lists emptied while it was held
        end
      elseif b then
        fair_hold(ring, k, b, caps.now_us) -- out of tokens: woken when one comes
      end
    end
  end
  return back
end

-- fair_release gives back the permits of ids (tasks a worker settled:
-- acked, retried or buried; "{key}" names a key without releasing
-- anything) and then puts their keys back on the ring if they were held
-- (fair_unblock).
local function fair_release(ring, ids, pending_key)
  local keys, seen = {}, {}
  local rprefix = fair_sibling(ring, "r") .. "|"
  for _, id in ipairs(ids) do
    local k = fair_key(id)
    if served_here(ring, {rprefix .. k}) then break end
    redis.call("SREM", rprefix .. k, id)
    if not seen[k] then
      seen[k] = true
      keys[#keys + 1] = k
    end
  end
  return fair_unblock(ring, keys, pending_key)
end

-- fair_park_depth is the most tasks the mover keeps in one key's list
-- of a fair queue of window w: the rest of a due run stays in the
-- delayed set, parked (fair_sibling "p"), until a refill brings the list
-- below fair_wake_depth(w) and wakes the shard's owner.
local function fair_park_depth(w)
  return 16 * w
end

local function fair_wake_depth(w)
  return 4 * w
end


-- fair_wait appends ready entries of fair queue q ("seq|id|blob", seq
-- already above fair_wait_base(); pending recorded by the caller) to
-- their keys' lists, grouped by key in order, and puts each key whose
-- lists were empty on the ring. keys[i] is the key of entries[i] and
-- levels[i] (nil: all 0) its priority level; an entry of level 1 or 2
-- goes to the key's list of that level and gives the key its stride
-- state (fair_levels_pop). flagged: the queues hash's "|lvl|<q>" is set
-- (fair_caps); the first entry of another level than normal sets it.
local function fair_wait(ring, keys, entries, levels, flagged)
  local by, order, leveled = {}, {}, false
  for i, k in ipairs(keys) do
    local l = by[k]
    if not l then
      l = {[0] = {}, [1] = {}, [2] = {}}
      by[k] = l
      order[#order + 1] = k
    end
    local lvl = levels and levels[i] or 0
    if lvl ~= 1 and lvl ~= 2 then lvl = 0 end
    if lvl > 0 then leveled = true end
    local e = l[lvl]
    e[#e + 1] = entries[i]
  end
  local vkey = fair_sibling(ring, "v")
  if leveled and not flagged then
    local tag, q = fair_parts(ring)
    redis.call("HSET", tag .. ":queues", "|lvl|" .. q, "1")
  end
  leveled = leveled or (flagged and redis.call("EXISTS", vkey) == 1)
  local new = {}
  for _, k in ipairs(order) do
    local l = by[k]
    if not leveled then
      if bulk("RPUSH", ring .. "|" .. k, l[0]) == #l[0] then new[#new + 1] = k end
    else
      if #l[1] + #l[2] > 0 then redis.call("HSETNX", vkey, k, "0|0|0|0") end
      if fair_len(ring, k) == 0 then new[#new + 1] = k end
      for lvl = 0, 2 do
        if #l[lvl] > 0 then bulk("RPUSH", fair_list(ring, k, lvl), l[lvl]) end
      end
    end
  end
  if #new > 0 then
    bulk("RPUSH", ring, new)
    -- A held key whose list ran empty (a change took its last task) is
    -- on the ring again: not held, so that fair_unblock cannot put it
    -- there twice. Its turn holds it again if it is still at its cap.
    local bkey = fair_sibling(ring, "b")
    if redis.call("EXISTS", bkey) == 1 then bulk("SREM", bkey, new) end
  end
end

-- fair_refill tops the ready list ready_key of fair queue q up to window
-- entries from the keys on its ring (ring: fair_ring), in turns: the key
-- at the ring's head gives up to its weight (field of "<tag>:fairw:<q>",
-- 1 if none; 0 pauses the key: its turn is skipped) of its entries, then
-- goes to the ring's tail; a key whose
-- list runs out leaves the ring. A turn cut short by a full window goes on
-- at the next refill ("<tag>:fairt:<q>" holds "left|key"). An entry whose
-- id is no longer pending under its number (cancelled, changed, enqueued
-- anew) is dropped. Entries enter the window with new sequence numbers
-- (seq_key), pending under them, and a push that makes the window
-- non-empty is announced (ready_pushed). The lists are not declared:
-- a list that is not on this node (its slot is being migrated) ends the
-- refill, having written what it took so far. A key the mover parked
-- (fair_park_depth) whose list falls below fair_wake_depth is unparked
-- and the shard's owner woken on "<tag>:wake", to move more of it.
-- Returns the number of entries added.
local function fair_refill(ring, seq_key, pending_key, ready_key, window)
  local room = window - redis.call("LLEN", ready_key)
  if room <= 0 then return 0 end
  local tag, q = fair_parts(ring)
  local caps, lvl = fair_caps(ring, q)
  local bkey = fair_sibling(ring, "b")
  -- A key held under a default cap that was removed since stays held
  -- until the recovery pass (fair_unblock) puts it back.
  local held = caps and redis.call("EXISTS", bkey) == 1
  -- Only held keys are left: a permit may have ended without a settle
  -- that said so (a cancel, a change); a few of them are looked at.
  if held and redis.call("LLEN", ring) == 0 and fair_unblock(ring, 16, pending_key) == 0 then
    return 0
  end
  local permits = {} -- key -> the ids that took its permits in this call
  local took = {} -- key -> entries taken from its list in this call
  local held_now = {} -- keys held by this call
  local buckets = {} -- key -> its token bucket (fair_rate), for keys with a rate
  local capped = {} -- keys with a cap: their permits are kept
  local rprefix = fair_sibling(ring, "r") .. "|"
  local wkey, tkey = fair_sibling(ring, "w"), fair_sibling(ring, "t")
  -- The keys whose turns come next, taken off the ring: room of them
  -- are enough while each gives at least one entry. When that takes the
  -- whole ring, the turns go round those keys here; else a key with
  -- entries left goes back to the ring's tail. A turn cut short by the
  -- window's end, and the keys not reached, go back to its head.
  local turn = redis.call("GET", tkey)
  local cur, left
  if turn then
    local l, k = string.match(turn, "^(%d+)|(.*)$")
    cur, left = k, tonumber(l)
  end
  local weighted = redis.call("EXISTS", wkey) == 1
  local vkey = fair_sibling(ring, "v")
  local leveled = lvl and redis.call("EXISTS", vkey) == 1
  local pkey = fair_sibling(ring, "p")
  local parking = redis.call("EXISTS", pkey) == 1
  local keep_ids, keep_rests, keep_keys, cut, cut_left = {}, {}, {}, nil, nil
  local rounds = 0
  while room > 0 and not cut and rounds < 4 do
    rounds = rounds + 1
    local keys = redis.call("LPOP", ring, room)
    if not keys then break end
    -- The keys' lists are not declared: while the slot migrates, one not
    -- on this node would read as empty and its key leave the ring.
    local lists = {}
    for _, k in ipairs(keys) do
      lists[#lists + 1] = ring .. "|" .. k
      fair_lists(ring, k, lists, leveled)
      if caps then lists[#lists + 1] = rprefix .. k end
      if caps and caps.now_us then fair_buckets(ring, caps, k, lists) end
    end
    if served_here(ring, lists) then
      for j = #keys, 1, -1 do redis.call("LPUSH", ring, keys[j]) end
      break
    end
    local whole = #keys < room -- the ring is empty now: go round here
    local back, got_all, got_keys = {}, {}, {}
    local h = 1
    while h <= #keys and room > 0 do
      local k = keys[h]
      h = h + 1
      local w = weighted and tonumber(redis.call("HGET", wkey, k) or "") or 1
      w = math.max(0, math.floor(w))
      if w > 0 and k == cur and left and left > 0 then w = left end -- a turn cut short goes on
      cur = nil
      local free, b, c = 0, nil, false
      if w > 0 then free, b, c = fair_room(ring, caps, k, pending_key, took[k]) end
      buckets[k], capped[k] = b or buckets[k], c or capped[k]
      if w == 0 then
        back[#back + 1] = k -- paused: its turn goes to the next key
      elseif free <= 0 then
        redis.call("SADD", bkey, k) -- at its cap: held until a permit frees
        held, held_now[k] = true, true
      else
        if held then redis.call("SREM", bkey, k) end
        local list = ring .. "|" .. k
        local ask = math.min(w, room, free)
        local st = leveled and redis.call("HGET", vkey, k)
        local got, n
        if st then
          -- Tasks of several levels: taken by stride between them.
          got, n = fair_levels_pop(ring, k, ask, st)
        else
          -- One entry more than the turn's tells whether the list goes
          -- on (it is put back), sparing a read of its length, which only
          -- a queue with parked keys needs.
          local extra = parking and 0 or 1
          got = redis.pcall("LPOP", list, ask + extra)
          if type(got) ~= "table" or not got.err then
            got = got or {}
            n = 0
            if #got > ask then
              redis.call("LPUSH", list, table.remove(got))
              n = 1
            elseif extra == 0 and #got == ask then
              n = redis.call("LLEN", list)
            end
          end
        end
        if got.err then
          h = h - 1 -- k goes back to the head
          break
        end
        for _, e in ipairs(got) do
          got_all[#got_all + 1] = e
          got_keys[#got_all] = k
        end
        took[k] = (took[k] or 0) + #got
        room = room - #got
        -- A parked key whose list runs low: its owner moves more of it.
        if parking and n < fair_wake_depth(window) and redis.call("HDEL", pkey, k) == 1 then
          redis.call("SPUBLISH", tag .. ":wake", string.format("%d", now_ms()))
        end
        if n > 0 then
          if ask >= free then
            redis.call("SADD", bkey, k) -- its cap ends the turn: held
            held, held_now[k] = true, true
          elseif ask < w then
            cut, cut_left = k, w - ask -- the window ended the turn
            break
          elseif whole then
            keys[#keys + 1] = k
          else
            back[#back + 1] = k
          end
        end
      end
    end
    for j = #keys, h, -1 do redis.call("LPUSH", ring, keys[j]) end
    if cut then redis.call("LPUSH", ring, cut) end
    if #back > 0 then redis.call("RPUSH", ring, unpack(back)) end
    -- Entries whose id is still pending under their number enter the
    -- window; a cancelled or changed task's entry is dropped, and its
    -- place goes to the next round.
    local ids, seqs = {}, {}
    for j, e in ipairs(got_all) do
      local sq, id = ready_entry(e)
      ids[j], seqs[j] = id or "", sq
    end
    for j, sc in ipairs(bulk_read("ZMSCORE", pending_key, ids)) do
      if sc and seqs[j] and tonumber(sc) == seqs[j] then
        keep_ids[#keep_ids + 1] = ids[j]
        keep_keys[#keep_ids] = got_keys[j]
        keep_rests[#keep_rests + 1] = string.sub(got_all[j], (string.find(got_all[j], "|", 1, true)))
      else
        room = room + 1
        local k = got_keys[j]
        took[k] = took[k] - 1 -- a stale entry takes no permit
        if held_now[k] then
          -- Held while its stale entries counted against its cap: back
          -- on the ring (for the next round) if a permit is free.
          held_now[k] = nil
          if fair_room(ring, caps, k, pending_key, took[k]) > 0 then
            redis.call("SREM", bkey, k)
            if fair_len(ring, k) > 0 then redis.call("RPUSH", ring, k) end
          else
            held_now[k] = true
          end
        end
      end
    end
    if whole and room > 0 and not cut then
      -- Stale entries freed places: the keys left go round again.
      if redis.call("LLEN", ring) == 0 then break end
    elseif whole then
      break
    end
  end
  if cut then
    redis.call("SET", tkey, string.format("%d", cut_left) .. "|" .. cut)
  elseif turn then
    redis.call("DEL", tkey)
  end
  -- Tokens are taken for the entries that entered the window; a key held
  -- out of tokens gets its wake-up (fair_hold).
  local function settle_rates(kept)
    if not caps or not caps.now_us then return end
    for k, n in pairs(kept) do
      if buckets[k] then fair_take(buckets[k], caps.now_us, n) end
    end
    for k in pairs(held_now) do
      if buckets[k] then fair_hold(ring, k, buckets[k], caps.now_us) end
    end
  end
  if #keep_ids == 0 then
    settle_rates({})
    return 0
  end
  local base = redis.call("INCRBY", seq_key, string.format("%d", #keep_ids)) - #keep_ids
  local pend, entries = {}, {}
  for j, id in ipairs(keep_ids) do
    local sq = string.format("%d", base + j)
    entries[j] = sq .. keep_rests[j]
    pend[#pend + 1] = sq
    pend[#pend + 1] = id
  end
  bulk("ZADD", pending_key, pend)
  ready_pushed(ready_key, bulk("RPUSH", ready_key, entries), #entries)
  if caps then
    for j, id in ipairs(keep_ids) do
      local k = keep_keys[j]
      if not permits[k] then permits[k] = {} end
      local l = permits[k]
      l[#l + 1] = id
    end
    local kept = {}
    for k, l in pairs(permits) do
      if capped[k] then
        bulk("SADD", rprefix .. k, l)
        redis.call("PEXPIRE", rprefix .. k, 604800000)
      end
      kept[k] = #l
    end
    settle_rates(kept)
  end
  return #keep_ids
end

-- fair_window returns the window of queue q if it is fair (the queues
-- hash's field "|fair|<q>"), else nil.
local function fair_window(queues_key, q)
  return tonumber(redis.call("HGET", queues_key, "|fair|" .. q) or "")
end

-- page_start returns the rank at which a page of sorted set key starts,
-- for a cursor (score cs, member cm; cs "" for the first page) and a
-- lower score bound min ("-inf" for none): right after the cursor member
-- if it is still there with that score, else right after where it would
-- sort (ties are ordered by member: a binary search among the members
-- scored cs, one ZRANGE of one rank a step), so that a cursor whose
-- member is gone, or was never in this set (a listing merged across
-- shards), skips exactly what sorts up to it however many share its
-- score. anchored is true once the start is exact (always but for a
-- first page). Never before the first member scored at least min. With
-- rev true the page goes from the highest score down: ranks are
-- ZREVRANK's, ties sort in reverse member order, and min is the highest
-- score listed ("+inf" for none).
local function page_start(key, cs, cm, min, rev)
  local start, anchored = 0, false
  local before = function(score) -- members sorting before score
    if rev then return redis.call("ZCOUNT", key, "(" .. score, "+inf") end
    return redis.call("ZCOUNT", key, "-inf", "(" .. score)
  end
  if cs ~= "" then
    local r
    if rev then r = redis.call("ZREVRANK", key, cm) else r = redis.call("ZRANK", key, cm) end
    local s = r and redis.call("ZSCORE", key, cm)
    if s and tonumber(s) == tonumber(cs) then
      start, anchored = r + 1, true
    else
      local lo = before(cs)
      local hi = lo + redis.call("ZCOUNT", key, cs, cs)
      while lo < hi do
        local mid = math.floor((lo + hi) / 2)
        local m
        if rev then m = redis.call("ZREVRANGE", key, mid, mid)[1] else m = redis.call("ZRANGE", key, mid, mid)[1] end
        if (rev and m < cm) or (not rev and m > cm) then hi = mid else lo = mid + 1 end
      end
      start, anchored = lo, true
    end
  end
  if min ~= "-inf" and min ~= "+inf" then
    local m = before(min)
    if m > start then start, anchored = m, true end
  end
  return start, anchored
end

-- page_rows reads up to limit members of key from rank start, with their
-- scores, dropping those at or before the cursor (cs, cm) when the start
-- is not anchored, and stopping before the first scored above max
-- ("+inf" for none). Returns the members, their scores (strings), the
-- last member and score examined (the next cursor) and whether the set
-- is exhausted. With rev true the ranks and the order are page_start's
-- reversed ones, and max is the lowest score listed ("-inf" for none).
local function page_rows(key, start, anchored, cs, cm, limit, max, rev)
  local rows
  if rev then
    rows = redis.call("ZREVRANGE", key, start, start + limit - 1, "WITHSCORES")
  else
    rows = redis.call("ZRANGE", key, start, start + limit - 1, "WITHSCORES")
  end
  local ids, scores = {}, {}
  local last_s, last_m = cs, cm
  local maxn = tonumber(max)
  local done = #rows < 2 * limit
  for i = 1, #rows, 2 do
    local m, s = rows[i], rows[i + 1]
    local sn = tonumber(s)
    if (rev and sn < maxn) or (not rev and sn > maxn) then
      done = true
      break
    end
    last_s, last_m = s, m
    if anchored or sn ~= tonumber(cs) or (rev and m < cm) or (not rev and m > cm) then
      ids[#ids + 1] = m
      scores[#scores + 1] = s
    end
  end
  return ids, scores, last_s, last_m, done
end

-- preview returns what a listing shows of encoded task data: its fields
-- and at most n bytes of its payload, and the payload's whole length in
-- bytes. Data in neither encoding comes back cut to its first 1024 bytes
-- (enough to say why it cannot be read), with length -1. A listing's
-- reply so stays small whatever the payloads (docs/protocol.md,
-- "Administration scripts").
local function preview(blob, n)
  local e, mr
  if string.byte(blob, 1) == 2 then
    if #blob >= 24 then e, mr = 24, struct.unpack(">I2", blob, 6) end
  else
    local _
    _, e, mr = string.find(blob, "^1|[^|]*|[^|]*|([^|]*)|[^|]*|[^|]*|[^|]*|")
  end
  if not e then return string.sub(blob, 1, 1024), -1 end
  -- A trace context is shown whole and is not payload (prio_split).
  if select(3, prio_split(tonumber(mr) or 0)) == 1 and #blob >= e + trace_len() then
    return string.sub(blob, 1, e + trace_len() + n), #blob - e - trace_len()
  end
  return string.sub(blob, 1, e + n), #blob - e
end

-- dead_match reports whether a dead letter matches the filter: queue
-- ("" any) against its data (read through qn, see queue_names), reason
-- ("" any) and error substring ("" any) against its record (JSON
-- {reason, error, at}).
local function dead_match(blob, info, queue, reason, err_sub, qn)
  if queue ~= "" and blob_queue(blob, qn) ~= queue then return false end
  if reason == "" and err_sub == "" then return true end
  local ok, rec = pcall(cjson.decode, info or "")
  if not ok or type(rec) ~= "table" then rec = {} end
  if reason ~= "" and rec.reason ~= reason then return false end
  if err_sub ~= "" and not string.find(tostring(rec.error or ""), err_sub, 1, true) then return false end
  return true
end

-- tally counts one operation in the shard's counts hash: field "#<op>"
-- (no queue's count: those are "<kind>|<queue>"). The schedulers export
-- their sums (Store.Operations) as hourglass_task_operations_total.
local function tally(counts_key, op)
  redis.call("HINCRBY", counts_key, "#" .. op, 1)
end

-- keep_of reads the record retention of queue from the shard's queues
-- hash (field "|keep|<queue>" = "age_ms|count", see Keys.KeepField):
-- {age_ms, count}, or nil when the queue keeps no records of its ended
-- tasks.
local function keep_of(queues_key, queue)
  local a, c = string.match(redis.call("HGET", queues_key, "|keep|" .. queue) or "", "^(%d+)|(%d+)$")
  if not a then return nil end
  return {tonumber(a), tonumber(c)}
end

-- drop_records deletes the records of ids from queue's index, and from
-- the ended hash those that are still records of queue (an id may have
-- ended again since, in another queue: that record stays).
local function drop_records(ended_key, index_key, queue, ids)
  if #ids == 0 then return end
  bulk("ZREM", index_key, ids)
  local gone = {}
  for j, rec in ipairs(bulk_read("HMGET", ended_key, ids)) do
    if rec and string.match(rec, "^%a+|%d+|%a*|([^|]*)") == queue then gone[#gone + 1] = ids[j] end
  end
  if #gone > 0 then bulk("HDEL", ended_key, gone) end
end

-- record_end keeps the final state of task id: ended_key (HASH) maps it
-- to "state|at_ms|was|queue|result" (was: the state it ended from),
-- index_key (the queue's ZSET of ended ids by time) scores it by now.
-- keep ({age_ms, count}) bounds the index: at most count records, the
-- oldest dropped first (never id's), and up to two records older than
-- age_ms dropped per call. The queues hash field "|rec|<queue>" says that
-- the queue has records and how old they may get: the owner's recovery
-- pass drops the rest of those past that age (recover.lua), and the field
-- once none is left. The state is then published on channel
-- (Client.Wait listens there), if given.
local function record_end(ended_key, index_key, queues_key, channel, id, state, was, queue, result, keep, now)
  local now_s = string.format("%d", now)
  redis.call("HSET", ended_key, id, state .. "|" .. now_s .. "|" .. was .. "|" .. queue .. "|" .. result)
  redis.call("ZADD", index_key, now_s, id)
  redis.call("HSET", queues_key, "|rec|" .. queue, string.format("%d", keep[1]))
  local old = redis.call("ZRANGE", index_key, "-inf", "(" .. string.format("%d", now - keep[1]), "BYSCORE", "LIMIT", 0, 2)
  local over = redis.call("ZCARD", index_key) - #old - keep[2]
  if over > 0 then
    -- The oldest first, never id itself (records of one millisecond
    -- tie, and then rank by id).
    local n = #old + over
    old = {}
    for _, o in ipairs(redis.call("ZRANGE", index_key, 0, n)) do
      if o ~= id and #old < n then old[#old + 1] = o end
    end
  end
  drop_records(ended_key, index_key, queue, old)
  if channel then redis.call("PUBLISH", channel, state) end
end
