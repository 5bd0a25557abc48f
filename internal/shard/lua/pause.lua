-- pause.lua: pause or resume a queue for the whole deployment, and tell
-- the workers.
--
-- KEYS[1] paused   HASH  queue -> unix ms when it was paused
-- ARGV[1] "pause" or "resume"
-- ARGV[2] queue name
-- ARGV[3] control channel: "<op> <queue>" is PUBLISHed there (classic
--         pub/sub: every worker subscribes, and re-reads KEYS[1] on each
--         message and on each (re)subscription)
--
-- Returns 1 when the state changed, 0 when it already was so (the
-- message is published in both cases: it is cheap and makes a worker that
-- missed a message re-read).
local changed
if ARGV[1] == "pause" then
  local t = redis.call("TIME")
  local now = string.format("%d", tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
  changed = redis.call("HSETNX", KEYS[1], ARGV[2], now)
elseif ARGV[1] == "resume" then
  changed = redis.call("HDEL", KEYS[1], ARGV[2])
else
  return redis.error_reply("pause: unknown operation " .. ARGV[1])
end
redis.call("PUBLISH", ARGV[3], ARGV[1] .. " " .. ARGV[2])
return changed
