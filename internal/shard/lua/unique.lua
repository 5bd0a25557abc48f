-- unique.lua: enqueue one task and reserve its id for a while: until the
-- reservation ends, an enqueue of the id through this script is refused
-- as a duplicate, even after the task finished (a producer's late retry,
-- a duplicate event). The reservation is a string KEYS[7] that expires
-- on its own (docs/protocol.md, "Unique ids").
--
-- @include: enqueue.lua as enqueue_protocol(KEYS, ARGV)
--
-- KEYS[1..6] as enqueue.lua: delayed, tasks, queues, far, counts, layout
--            marker (KEYS[6] with the "@gen" argument)
-- KEYS[7] reservation STRING {ns:s}:unique:<id>, there while the id is
--                      reserved
-- ARGV[1] how long to reserve the id, ms (1 or more), from now
-- ARGV[2..] enqueue.lua's arguments for one task: "@<gen>" (optional),
--         the wake channel, then the task's six
--
-- Returns enqueue.lua's reply for the task, {code, due, detail}, or its
-- error; an id that is reserved and not live is {0, -1, "reserved"}
-- (nothing written). The reservation is made only when the task is
-- stored.
if #ARGV[1] > 13 or not string.match(ARGV[1], "^0*[1-9]%d*$") then
  return {-3, 0, "invalid reservation (whole ms, 1 or more)"}
end
local argv = {unpack(ARGV, 2)}
local gen = string.match(argv[1] or "", "^@(%d+)$")
local id = argv[gen and 3 or 2]
if redis.call("EXISTS", KEYS[7]) == 1 and redis.call("HEXISTS", KEYS[2], id or "") == 0 then
  -- Reserved. A producer on an older layout is sent to the id's new
  -- shard first, as enqueue.lua sends it (its check writes nothing).
  local marker = gen and KEYS[6] and redis.call("GET", KEYS[6])
  local g = marker and tonumber(string.match(marker, "^(%d+)|"))
  if g and g > tonumber(gen) then
    return enqueue_protocol({KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]}, argv)
  end
  return {0, -1, "reserved"}
end
local r = enqueue_protocol({KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]}, argv)
if not r.err and r[1] == 1 then
  redis.call("SET", KEYS[7], "1", "PX", ARGV[1])
  tally(KEYS[5], "unique")
end
return r
