-- adopt.lua: take over periodic schedules handed over by their old home
-- (handoff.lua) in their new home shard: a schedule's last occurrence
-- becomes the handed-over one if that is later than what this shard
-- records (or it records nothing, or a "moved:" mark of an earlier
-- change), with its last task; its last fired occurrence likewise.
-- Idempotent; either home's owner may call it.
--
-- KEYS[1] periodic HASH  as in handoff.lua
-- ARGV groups of four: schedule name, last occurrence ms, last task id,
--      last fired occurrence ms ("0": none)
--
-- Returns the number of schedules whose state changed.
local changed = 0
for i = 1, #ARGV, 4 do
  local name, last, task, fired = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2], tonumber(ARGV[i + 3])
  local cur_fired = tonumber(redis.call("HGET", KEYS[1], name .. "|fired") or "0")
  if fired > cur_fired then redis.call("HSET", KEYS[1], name .. "|fired", ARGV[i + 3]) end
  local cur = tonumber(string.match(redis.call("HGET", KEYS[1], name) or "", "^%d+$") or "-1")
  if last > 0 and last > cur then
    redis.call("HSET", KEYS[1], name, ARGV[i + 1])
    if task ~= "" then redis.call("HSET", KEYS[1], name .. "|task", task) end
    changed = changed + 1
  elseif cur < 0 and last == 0 then
    -- No occurrence anywhere yet: drop a "moved:" mark of an earlier
    -- change, so that fire.lua fires it here.
    if redis.call("HDEL", KEYS[1], name) == 1 then changed = changed + 1 end
  end
end
return changed
