-- depth.lua: a shard's task counts per queue, read-only. Bounded by the
-- number of queues (those registered, and those the counts name).
--
-- Task data of encoding version 2 names its queue by number: the script
-- reads the name of a ready list's head from KEYS[2] (lib.lua's
-- queue_name).
--
-- KEYS[1] counts   HASH  "s|<queue>", "l|<queue>", "d|<queue>" (see lib.lua's count)
-- KEYS[2] queues   HASH  queue -> policy (field "|far" is not a queue)
-- ARGV[1] ready-list key prefix of the shard (the queue name is appended)
-- ARGV[2] pending key prefix of the shard (the queue name is appended)
--   (these lists are not declared: the script checks that this node serves
--   them before it reads them, see lib.lua's served_here)
--
-- Returns, per queue, eight values: name, policy ("" when not registered:
-- only counts name it, "" is the queue of dead data that names none),
-- scheduled, ready, leased, popped, dead, oldest. ready is the length of the
-- queue's ready list and, for a fair queue, the tasks waiting in its keys'
-- lists (lib.lua's fair_wait); popped the ids pending but no longer in it (taken by a
-- worker, not leased yet): pending minus ready, at least 0; oldest the due
-- time (ms) of the ready list's head entry, the task that has waited
-- longest, -1 when the list is empty or its head carries no task. Counters may
-- be negative after hand edits; the caller clamps them. Fails with
-- "TRYAGAIN ..." while the shard's slot is being migrated and a list it
-- reads is not on this node (a list not moved yet would read as empty
-- there).
local names, policy = {}, {}
local qs = redis.call("HGETALL", KEYS[2])
for i = 1, #qs, 2 do
  if string.sub(qs[i], 1, 1) ~= "|" then -- not "|far" nor "|keep|<queue>"
    names[#names + 1] = qs[i]
    policy[qs[i]] = qs[i + 1]
  end
end
local counts = {}
local cs = redis.call("HGETALL", KEYS[1])
for i = 1, #cs, 2 do
  local kind, q = string.match(cs[i], "^(%a)|(.*)$")
  if kind then
    if counts[q] == nil then
      counts[q] = {}
      if policy[q] == nil then
        policy[q] = ""
        names[#names + 1] = q
      end
    end
    counts[q][kind] = tonumber(cs[i + 1])
  end
end
local lists = {}
for _, q in ipairs(names) do
  lists[#lists + 1] = ARGV[1] .. q
  lists[#lists + 1] = ARGV[2] .. q
end
local moving = served_here(KEYS[1], lists)
if moving then return moving end
local out = {}
for _, q in ipairs(names) do
  local c = counts[q] or {}
  local ready = redis.call("LLEN", ARGV[1] .. q)
  local oldest = -1
  if ready > 0 then
    local head = redis.call("LINDEX", ARGV[1] .. q, 0) or ""
    local _, _, _, _, due = header(string.match(head, "^%d+|[^|]+|(.*)$"), queue_names(KEYS[2]))
    oldest = tonumber(due or "-1")
  end
  local pend = redis.call("ZCARD", ARGV[2] .. q)
  if pend > ready then
    -- A fair queue's tasks waiting in their keys' lists are ready too
    -- (lib.lua's fair_wait).
    ready = ready + redis.call("ZCOUNT", ARGV[2] .. q, string.format("%d", fair_wait_base()), "+inf")
  end
  local popped = pend - ready
  if popped < 0 then popped = 0 end
  out[#out + 1] = q
  out[#out + 1] = policy[q]
  out[#out + 1] = c.s or 0
  out[#out + 1] = ready
  out[#out + 1] = c.l or 0
  out[#out + 1] = popped
  out[#out + 1] = c.d or 0
  out[#out + 1] = oldest
end
return out
