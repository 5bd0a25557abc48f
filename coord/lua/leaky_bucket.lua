-- leaky_bucket.lua: leaky bucket as a meter. Requests leave the bucket
-- one interval apart: a request is scheduled at max(now, next free slot)
-- and admitted if it waits at most capacity intervals; the caller waits
-- the returned delay, then acts.
--
-- KEYS[1] meter  STRING next free slot, server time in µs; expires once
--                the bucket has drained
-- ARGV[1] interval in µs
-- ARGV[2] capacity: most intervals a request may wait (so a burst of
--         capacity+1 requests is admitted at once)
-- ARGV[3] cost (slots taken, one interval each)
--
-- Returns {allowed 0|1, remaining, retry_after_us, reset_after_us,
-- delay_us}: remaining is how many more single requests would be admitted
-- now, delay how long the admitted request must wait for its slot.
local now = now_us()
local iv, cap, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local nextfree = tonumber(redis.call("GET", KEYS[1]) or "0")
local start = math.max(now, nextfree)
local delay = start - now
local maxdelay = cap * iv
if delay > maxdelay then
  return {0, 0, delay - maxdelay, delay, 0}
end
local newnext = start + cost * iv
redis.call("SET", KEYS[1], string.format("%d", newnext), "PX", math.ceil((newnext - now) / 1000))
local remaining = math.floor((maxdelay - (newnext - now)) / iv) + 1
if remaining < 0 then remaining = 0 end
return {1, remaining, 0, newnext - now, delay}
