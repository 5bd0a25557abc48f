-- lib.lua: helpers prepended to every script except enqueue.lua.
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
-- one is counted in stats_key and rejected. Returns ok, stored_epoch.
local function fence(epoch_key, stats_key, epoch_arg)
  local epoch = tonumber(epoch_arg)
  local cur = tonumber(redis.call("GET", epoch_key) or "0")
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
