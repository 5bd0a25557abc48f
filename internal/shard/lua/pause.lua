-- pause.lua: pause or resume a queue for the whole deployment, or set or
-- clear its flow-control limits, and tell the workers.
--
-- KEYS[1] paused   HASH  queue -> unix ms when it was paused; field
--                        "|lim|<queue>" -> the queue's limits set at run
--                        time (JSON, see docs/operations.md); field
--                        "|route|<queue>" -> which workers may take its
--                        tasks (JSON, see docs/operations.md)
-- ARGV[1] "pause", "resume", "limit", "unlimit", "route" or "unroute"
-- ARGV[2] queue name
-- ARGV[3] control channel: "<op> <queue>" is PUBLISHed there (classic
--         pub/sub: every worker subscribes, and re-reads KEYS[1] on each
--         message and on each (re)subscription)
-- ARGV[4] for "limit": the limits (JSON); for "route": the routing (JSON)
--
-- Returns 1 when the state changed, 0 when it already was so (the
-- message is published in both cases: it is cheap and makes a worker that
-- missed a message re-read).
-- store sets field of KEYS[1] to v and returns 1 when that changed it.
local function store(field, v)
  local was = redis.call("HGET", KEYS[1], field)
  redis.call("HSET", KEYS[1], field, v)
  return was == v and 0 or 1
end

local changed
if ARGV[1] == "pause" then
  local t = redis.call("TIME")
  local now = string.format("%d", tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
  changed = redis.call("HSETNX", KEYS[1], ARGV[2], now)
elseif ARGV[1] == "resume" then
  changed = redis.call("HDEL", KEYS[1], ARGV[2])
elseif ARGV[1] == "limit" then
  changed = store("|lim|" .. ARGV[2], ARGV[4])
elseif ARGV[1] == "unlimit" then
  changed = redis.call("HDEL", KEYS[1], "|lim|" .. ARGV[2])
elseif ARGV[1] == "route" then
  changed = store("|route|" .. ARGV[2], ARGV[4])
elseif ARGV[1] == "unroute" then
  changed = redis.call("HDEL", KEYS[1], "|route|" .. ARGV[2])
else
  return redis.error_reply("pause: unknown operation " .. ARGV[1])
end
redis.call("PUBLISH", ARGV[3], ARGV[1] .. " " .. ARGV[2])
return changed
