-- commit.lua: drop the outbox entries of tasks imported into their new
-- shards, last of the steps export -> import -> commit
-- (docs/resharding.md). Run by the shard's owner, fenced by its epoch.
--
-- KEYS[1] outbox     HASH   task id -> entry (export.lua)
-- KEYS[2] epoch      STRING fencing epoch of the shard's owner
-- KEYS[3] stats      HASH   counters (stale_epoch)
-- KEYS[4] cancelled  HASH   outbox entries cancelled on their way
--                           (cancel.lua)
-- ARGV[1] caller's epoch
-- ARGV[2..] task ids
--
-- Returns {code, then per id: 1 committed (its outbox entry dropped); 2
-- cancelled on its way: the caller removes the imported copy
-- (unimport.lua), then the entry of KEYS[4] (Forget); 0 neither (an
-- earlier commit, of this owner or a previous one, dropped it: nothing to
-- do)}; code -10 when ARGV[1] is older than the stored epoch, nothing
-- written.
local ok, stored = fence(KEYS[2], KEYS[3], ARGV[1])
if not ok then return {-10, stored} end
local out = {1}
for i = 2, #ARGV do
  local r = redis.call("HDEL", KEYS[1], ARGV[i])
  if r == 0 and redis.call("HEXISTS", KEYS[4], ARGV[i]) == 1 then r = 2 end
  out[#out + 1] = r
end
return out
