-- claim.lua: lease ids a worker popped from one ready list.
--
-- KEYS[1] tasks      HASH  task id -> encoded task
-- KEYS[2] inflight   ZSET  task id -> lease deadline ms
-- KEYS[3] leases     HASH  task id -> delivery token
-- KEYS[4] seq        STRING sequence counter (tokens come from it)
-- KEYS[5] pending    ZSET  task id -> sequence, of the popped list's queue
-- KEYS[6] dead       ZSET  task id -> time buried
-- KEYS[7] dead info  HASH  task id -> JSON
-- ARGV[1] lease in ms, or "" for each task's own timeout
-- ARGV[2..n] popped ready-list entries, "seq|id"
--
-- An entry is leased only if its id is pending under the entry's sequence
-- number: a leftover duplicate entry (a re-delivery) or a cancelled task is
-- skipped. Undecodable data is buried. Returns {now, id_1, token_1,
-- deadline_1, blob_1, id_2, ...} for the leased ids only.
local now = now_ms()
local out = {now}
for i = 2, #ARGV do
  local seq, id = ready_entry(ARGV[i])
  local cur = id and redis.call("ZSCORE", KEYS[5], id)
  if cur and tonumber(cur) == seq then
    redis.call("ZREM", KEYS[5], id)
    local blob = redis.call("HGET", KEYS[1], id)
    local task, why = decode(blob)
    if task then
      local lease = tonumber(ARGV[1]) or task.timeout
      local deadline = now + lease
      local token = string.format("%d", redis.call("INCR", KEYS[4]))
      redis.call("ZADD", KEYS[2], deadline, id)
      redis.call("HSET", KEYS[3], id, token)
      out[#out + 1] = id
      out[#out + 1] = token
      out[#out + 1] = deadline
      out[#out + 1] = blob
    else
      bury(KEYS[6], KEYS[7], id, now, why, "")
    end
  end
end
return out
