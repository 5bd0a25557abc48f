-- commit.lua: drop the outbox entries of tasks imported into their new
-- shards, last of the steps export -> import -> commit
-- (docs/resharding.md). Run by the shard's owner, fenced by its epoch.
--
-- KEYS[1] outbox  HASH   task id -> entry (export.lua)
-- KEYS[2] epoch   STRING fencing epoch of the shard's owner
-- KEYS[3] stats   HASH   counters (stale_epoch)
-- ARGV[1] caller's epoch
-- ARGV[2..] task ids
--
-- Returns {code, per id 1 (committed) or 0 (no entry: cancelled while it
-- was on its way; the caller removes the imported copy, unimport.lua)};
-- code -10 when ARGV[1] is older than the stored epoch, nothing written.
local ok, stored = fence(KEYS[2], KEYS[3], ARGV[1])
if not ok then return {-10, stored} end
local out = {1}
for i = 2, #ARGV do
  out[#out + 1] = redis.call("HDEL", KEYS[1], ARGV[i])
end
return out
