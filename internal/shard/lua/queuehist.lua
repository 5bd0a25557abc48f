-- queuehist.lua: add one process's figures to the minute history of
-- queues (QueueHistory in Go; docs/operations.md, "Queue history").
--
-- A queue's history of one UTC day is a string of 1440 fixed-size
-- records, one per minute, read with GETRANGE. The caller knows the
-- layout of a record and names each field by its type and bit offset in
-- the string, so this script only adds and compares numbers. A day's
-- string is created whole (zeros) by its first write: a string grown by
-- BITFIELD would be given room ahead, up to twice its length.
--
-- KEYS[i]  STRING  a queue's history of one UTC day,
--                  "{ns}:qhist:<queue>:<yyyymmdd>"; every key of a call
--                  has the namespace's hash tag (one Cluster slot)
-- ARGV[1]  the size of a day's string in bytes (1440 records)
-- ARGV[1+i] "@<unix ms>", when KEYS[i] expires (PEXPIREAT, set at each
--          write: its day's end and seven days), then the operations on
--          KEYS[i], each after a space, "<op><type>:<bit offset>:<value>":
--          op "+" adds the value
--          (saturating at the type's maximum), ">" keeps the larger of
--          the value and the field's; type "u24" or "u32"; the field
--          must lie inside the string
--
-- Returns the number of keys written. An operation that does not parse
-- or names a field outside the string fails the call before any write.
local size = tonumber(ARGV[1])
if not size or size < 1 or size > 1048576 then
    return redis.error_reply("ERR queuehist: bad size")
end
local plans = {}
for i = 1, #KEYS do
    local ops = ARGV[1 + i]
    if not ops then
        return redis.error_reply("ERR queuehist: no operations for key " .. i)
    end
    local plan = { add = { "OVERFLOW", "SAT" }, max = {} }
    local at, body = string.match(ops, "^@(%d+)(.*)$")
    plan.at = tonumber(at)
    if not plan.at then
        return redis.error_reply("ERR queuehist: no expiry for key " .. i)
    end
    local rest = string.gsub(body, "([+>])(u%d%d):(%d+):(%d+)", function(op, ty, off, v)
        local o = tonumber(off)
        local bits = tonumber(string.sub(ty, 2))
        if (bits ~= 24 and bits ~= 32) or o + bits > size * 8 then
            plan.bad = ty .. ":" .. off
        elseif op == "+" then
            local a = plan.add
            a[#a + 1] = "INCRBY"
            a[#a + 1] = ty
            a[#a + 1] = off
            a[#a + 1] = v
        else
            plan.max[#plan.max + 1] = { ty, off, tonumber(v) }
        end
        return ""
    end)
    if plan.bad or string.find(rest, "[^ ]") then
        return redis.error_reply("ERR queuehist: bad operation in " .. string.sub(ops, 1, 80))
    end
    plans[i] = plan
end
for i, key in ipairs(KEYS) do
    if redis.call("EXISTS", key) == 0 then
        redis.call("SET", key, string.rep("\0", size))
    end
    local plan = plans[i]
    if #plan.add > 2 then
        redis.call("BITFIELD", key, unpack(plan.add))
    end
    for _, m in ipairs(plan.max) do
        local cur = redis.call("BITFIELD", key, "GET", m[1], m[2])[1]
        if m[3] > cur then
            redis.call("BITFIELD", key, "SET", m[1], m[2], m[3])
        end
    end
    redis.call("PEXPIREAT", key, plan.at)
end
return #KEYS
