-- layout.lua: change the layout record, the one place that says how many
-- shards there are and whether a change of that count runs
-- (docs/resharding.md). Every change is a compare-and-set on the
-- generation, so two operators cannot start two changes.
--
-- KEYS[1] record HASH "{ns}:layout":
--           gen          generation (1 for the first change)
--           shards       shard count new tasks are placed by, followed
--                        by "k" when they are placed by key ("16k")
--           from         shard count being left ("0" when stable), "k"
--                        as above
--           state        "preparing" | "resharding" | "stable"
--                        ("migrating", the name before 2026-11, is read
--                        as "resharding")
--           started_ms, finished_ms
--           done:<s>     "1" once shard s has nothing left to move
--           ndone        number of done:<s> fields
--           moved        tasks moved so far by this change
-- ARGV[1] operation, then its arguments:
--   "begin"  ARGV[2] expected generation ("0": no record yet), ARGV[3] new
--            shard count, ARGV[4] the current one. Starts generation
--            expected+1 in state "preparing".
--            Returns {1, gen} or, when the record is not at the expected
--            generation or a change is running, {0, stored gen, state}.
--   "start"  ARGV[2] generation. "preparing" -> "resharding" (the markers
--            are written). Returns {1, gen} or {0, stored gen, state}.
--   "done"   ARGV[2] generation, ARGV[3] shard, ARGV[4] span (shards that
--            must be done). Records that the shard is done; when every
--            shard 0..span-1 is, the change ends: state "stable", from
--            "0". Returns {1, 1} when this call ended it, {1, 0} when not
--            (or it had ended), {0, stored gen, state} for another
--            generation.
--   "moved"  ARGV[2] generation, ARGV[3] count. Adds to "moved" while
--            that generation reshards. Returns {1, total} or {0, ...}.
local op = ARGV[1]
local rec = redis.call("HMGET", KEYS[1], "gen", "state")
local gen, state = tonumber(rec[1] or "0"), rec[2] or "stable"
if state == "migrating" then state = "resharding" end
local t = redis.call("TIME")
local now = string.format("%d", tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))

if op == "begin" then
  if gen ~= tonumber(ARGV[2]) or state ~= "stable" then
    return {0, gen, state}
  end
  local g = string.format("%d", gen + 1)
  redis.call("DEL", KEYS[1])
  redis.call("HSET", KEYS[1], "gen", g, "shards", ARGV[3], "from", ARGV[4],
    "state", "preparing", "started_ms", now, "ndone", "0", "moved", "0")
  return {1, gen + 1}
end

if gen ~= tonumber(ARGV[2]) then
  return {0, gen, state}
end
if op == "start" then
  if state ~= "preparing" then return {0, gen, state} end
  redis.call("HSET", KEYS[1], "state", "resharding")
  return {1, gen}
elseif op == "done" then
  if state ~= "resharding" then return {1, 0} end
  if redis.call("HSETNX", KEYS[1], "done:" .. ARGV[3], "1") == 1 then
    redis.call("HINCRBY", KEYS[1], "ndone", 1)
  end
  local span = tonumber(ARGV[4])
  for s = 0, span - 1 do
    if redis.call("HEXISTS", KEYS[1], "done:" .. s) == 0 then return {1, 0} end
  end
  redis.call("HSET", KEYS[1], "state", "stable", "from", "0", "finished_ms", now)
  return {1, 1}
elseif op == "moved" then
  if state ~= "resharding" then return {0, gen, state} end
  return {1, redis.call("HINCRBY", KEYS[1], "moved", ARGV[3])}
end
return redis.error_reply("layout: unknown operation " .. tostring(op))
