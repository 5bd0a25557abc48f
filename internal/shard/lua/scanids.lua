-- scanids.lua: one HSCAN step over a shard's task hash, returning the ids
-- only (the values are task data, payloads included, which the caller
-- does not need). Read-only.
--
-- KEYS[1] tasks  HASH  task id -> encoded task
-- ARGV[1] cursor ("0" to start)
-- ARGV[2] COUNT hint
--
-- Returns {next cursor ("0": done), id, id, ...}.
local r = redis.call("HSCAN", KEYS[1], ARGV[1], "COUNT", ARGV[2])
local out = {r[1]}
for i = 1, #r[2], 2 do
  out[#out + 1] = r[2][i]
end
return out
