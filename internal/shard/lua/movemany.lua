-- movemany.lua: move.lua for several shards that live on one Redis
-- server, in one call. A scheduler owning many shards of a standalone or
-- Sentinel-managed Redis sends this when several of its shards are due
-- at once (internal/scan's combiner), so that sixteen shards cost Redis
-- the per-call overhead of one call, not sixteen. Each shard runs
-- move.lua exactly as a call of its own would: fenced by its own epoch,
-- bounded by its own LIMIT, with its own reply. Not for Redis Cluster:
-- the keys of the shards after the first are not declared (a cluster
-- routes a call by its declared keys, and they would lie in several
-- slots), so Store.MoveMany sends move.lua per shard there.
--
-- @include: move.lua as move_shard(KEYS, ARGV)
--
-- KEYS[1] the first shard's delayed set (move.lua's KEYS[1]), declared
--         so that the call has a key; it is read again from ARGV
-- ARGV[1] n: the number of shards in the call, 1 or more
-- ARGV[2 ..] per shard, 17 values: move.lua's KEYS[1] .. KEYS[11], then
--         its ARGV[1] .. ARGV[6] (epoch, LIMIT, ready-list prefix,
--         pending prefix, prefetch ms, dense window ms)
--
-- Returns one element per shard, in order: move.lua's reply for it
-- ({1, moved, ...}, {-1, stored_epoch}) or the error reply it returned
-- (lib.lua's served_here: TRYAGAIN while the shard's slot migrates,
-- which cannot happen outside a cluster, or the error of its EXISTS).
-- go-redis (v9.23) fails the whole reply on an element of the errors it
-- parses into types of its own (TRYAGAIN, MOVED, ASK, LOADING, READONLY
-- and the like), so that every shard of the call sees it; other errors
-- arrive as the shard's element. A raised error ends the call: the
-- shards before it were moved and their replies are lost, which the
-- caller treats as it treats the error of a move.lua call (it calls
-- again; moving twice is harmless).
local n = tonumber(ARGV[1])
if not n or n < 1 or #ARGV ~= 1 + 17 * n then
  return redis.error_reply("ERR movemany: want 1 + 17 * n arguments for n shards, got " .. #ARGV)
end
local out = {}
for i = 0, n - 1 do
  local base = 1 + 17 * i
  local keys = {unpack(ARGV, base + 1, base + 11)}
  local argv = {unpack(ARGV, base + 12, base + 17)}
  out[i + 1] = move_shard(keys, argv)
end
return out
