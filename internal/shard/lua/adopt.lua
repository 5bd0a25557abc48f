-- adopt.lua: take over periodic schedules handed over by their old home
-- (handoff.lua) in their new home shard: a schedule's last occurrence
-- becomes the handed-over one if that is later than what this shard
-- records (or it records nothing, or a "moved:" mark of an earlier
-- change), with its last task. Idempotent; either home's owner may call
-- it.
--
-- KEYS[1] periodic HASH  as in handoff.lua
-- ARGV pairs of three: schedule name, last occurrence ms, last task id
--
-- Returns the number of schedules whose state changed.
local changed = 0
for i = 1, #ARGV, 3 do
  local name, last, task = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2]
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
