-- handoff.lua: hand periodic schedules over to their new home shard
-- while the shard count changes (docs/resharding.md, "Periodic
-- schedules"). Run by the old home's owner, fenced by its epoch. Each
-- schedule's last occurrence is marked "moved:<ms>": from then on
-- fire.lua refuses to fire it here (code 8), so an owner that has not
-- seen the new layout yet cannot fire an occurrence the new home fires
-- too. The new home takes the value over (adopt.lua). Idempotent.
--
-- KEYS[1] periodic HASH  schedule name -> last occurrence (unix ms), or
--                        "moved:<ms>" once handed over; "<name>|task" ->
--                        the id of the last task it enqueued;
--                        "<name>|fired" -> the last occurrence whose task
--                        was stored (fire.lua)
-- KEYS[2] epoch    STRING fencing epoch of the shard's owner
-- KEYS[3] stats    HASH  counters (stale_epoch)
-- KEYS[4] marker   STRING the shard's layout marker "gen|shards|from"
-- ARGV[1] caller's epoch, or "" (the new home's owner hands a schedule
--         over itself: the mark is atomic with fire.lua's check, so no
--         fence is needed for it)
-- ARGV[2] the marker of the change the caller hands over for: another
--         value (a later change began) refuses the call
-- ARGV[3..] schedule names
--
-- Returns {code, then per name: last occurrence ms ("0": none), last
-- task id ("": none), last fired occurrence ms ("0": none)}; code -10 when ARGV[1] is older than the stored
-- epoch, -11 when the marker is not ARGV[2] (nothing written either way).
if ARGV[1] ~= "" then
  local ok, stored = fence(KEYS[2], KEYS[3], ARGV[1])
  if not ok then return {-10, stored} end
end
if redis.call("GET", KEYS[4]) ~= ARGV[2] then return {-11, 0} end
local out = {1}
for i = 3, #ARGV do
  local name = ARGV[i]
  local v = redis.call("HGET", KEYS[1], name) or "0"
  local last = string.match(v, "^moved:(%d+)$")
  if not last then
    last = string.match(v, "^%d+$") or "0"
    redis.call("HSET", KEYS[1], name, "moved:" .. last)
  end
  out[#out + 1] = last
  out[#out + 1] = redis.call("HGET", KEYS[1], name .. "|task") or ""
  out[#out + 1] = redis.call("HGET", KEYS[1], name .. "|fired") or "0"
end
return out
