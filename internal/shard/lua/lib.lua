-- lib.lua: helpers for every script but enqueue.lua; luascript.Prune
-- prepends to each script only those it uses.
-- It defines functions only and touches no key by itself.

-- now_ms returns Redis server time in unix milliseconds.
local function now_ms()
  local t = redis.call("TIME")
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- decode parses an encoded task (version 1). It returns nil and a reason
-- when blob is not a valid encoding.
--   1|queue|attempts|max_retries|timeout_ms|due_ms|enqueued_ms|payload
local function decode(blob)
  if not blob then return nil, "no task data" end
  local v, q, att, mr, to, due, enq, pos = string.match(blob,
    "^(%d+)|([^|]+)|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|()")
  if not v then return nil, "undecodable task data" end
  if v ~= "1" then return nil, "unsupported task encoding version " .. v end
  return {queue = q, attempts = tonumber(att), max_retries = tonumber(mr),
    timeout = tonumber(to), due = tonumber(due), enqueued = tonumber(enq),
    pos = pos}
end

-- fence checks the caller's epoch against the shard's stored one. A newer
-- epoch is stored (the first script a new owner runs records it); an older
-- one is counted in stats_key and rejected. Returns ok and, when not ok,
-- the stored epoch.
local function fence(epoch_key, stats_key, epoch_arg)
  local stored = redis.call("GET", epoch_key)
  if stored == epoch_arg then return true, stored end -- the usual case
  local epoch = tonumber(epoch_arg)
  local cur = tonumber(stored or "0")
  if epoch < cur then
    redis.call("HINCRBY", stats_key, "stale_epoch", 1)
    return false, cur
  end
  if epoch > cur then
    redis.call("SET", epoch_key, epoch_arg)
  end
  return true, epoch
end

-- bury moves a task id to the dead-letter set with a reason, keeping its
-- data (if any) so it can be inspected and replayed.
local function bury(dead_key, info_key, id, now, reason, last_error)
  redis.call("ZADD", dead_key, now, id)
  redis.call("HSET", info_key, id,
    cjson.encode({reason = reason, error = last_error or "", at = now}))
end

-- encode renders task fields with the payload of the original blob.
local function encode(t, blob)
  return "1|" .. t.queue .. "|" .. string.format("%d", t.attempts) .. "|" ..
    string.format("%d", t.max_retries) .. "|" .. string.format("%d", t.timeout) ..
    "|" .. string.format("%d", t.due) .. "|" .. string.format("%d", t.enqueued) ..
    "|" .. string.sub(blob, t.pos)
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
local function policy_backoff(policy)
  if not policy then return nil end
  return string.match(policy, "^%d+|%d+|%d+|(%d+|%d+|[%d%.]+)$")
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

-- make_ready appends "seq|id|blob" to a ready list and records id as
-- pending (ready, not yet leased) under that new sequence number. The
-- entry carries the task, so a worker can run it without another read.
-- Sequence numbers grow along the list, so a pending id whose number is
-- below the number of the list's head has been popped by a worker that has
-- not leased it (it runs it, leases it, or crashed). An entry whose number
-- is not the id's pending number is a leftover duplicate and is skipped.
local function make_ready(seq_key, pending_key, ready_key, id, blob)
  local seq = string.format("%d", redis.call("INCR", seq_key))
  redis.call("ZADD", pending_key, seq, id)
  redis.call("RPUSH", ready_key, seq .. "|" .. id .. "|" .. blob)
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
  local head = redis.call("LINDEX", ready_key, 0)
  if not head then return true end
  local hs = ready_entry(head)
  return hs ~= nil and hs > seq
end

-- end_delivery ends the current delivery of id if token is its token:
-- either a leased one (token in leases_key) or one a worker runs without a
-- lease yet (id pending in pending_key under the number token, its entry
-- popped). pending_key may be nil: leased deliveries only. Returns false,
-- changing nothing, when token is stale.
local function end_delivery(inflight_key, leases_key, pending_key, id, token)
  if pending_key then
    local s = redis.call("ZSCORE", pending_key, id)
    -- Redis writes an integral score as its digits, as the token is
    -- written: equal strings spare the parsing.
    if s and (s == token or tonumber(s) == tonumber(token)) then
      redis.call("ZREM", pending_key, id)
      return true
    end
  end
  if redis.call("HGET", leases_key, id) ~= token then
    return false
  end
  redis.call("ZREM", inflight_key, id)
  redis.call("HDEL", leases_key, id)
  return true
end

-- bulk runs cmd on key with args in chunks of at most 1000 arguments
-- (an even number, so ZADD score/member pairs stay together), keeping
-- within Lua's unpack limit however large the batch.
local function bulk(cmd, key, args)
  local n = #args
  for i = 1, n, 1000 do
    redis.call(cmd, key, unpack(args, i, math.min(i + 999, n)))
  end
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
