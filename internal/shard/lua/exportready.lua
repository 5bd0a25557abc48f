-- exportready.lua: take ready tasks that wait for a worker out of their
-- ready list, to the outbox, while the shard count changes (the export
-- step of docs/resharding.md for ready tasks, "What stays"). Run by the
-- shard's owner, fenced by its epoch, for tasks of a paused queue or
-- that waited longer than the owner's grace: left where they are, such
-- tasks would keep the old shard from being done until someone consumes
-- them. Each leaves as a scheduled task due at its due time (already
-- past): the new shard's mover makes it ready again at once. Its
-- attempts, last error and data are kept, and so nothing is lost; only
-- its place in the queue's order changes.
--
-- Task data of encoding version 2 names its queue by number: the script
-- reads the name from the shard's queues hash ({tag}:queues, not
-- declared, in the shard's slot; lib.lua's queue_name), and fails with
-- "TRYAGAIN ...", nothing written, while that hash is not on the node.
--
-- An entry is taken only if it is still at the index given and its id
-- is still pending under its number: an entry a worker popped meanwhile
-- is in flight, and stays. Taken entries are replaced by a tombstone,
-- then removed with one LREM (the list is not rewritten).
--
-- KEYS[1] ready list  LIST  entries "seq|id|encoded task" of one queue
-- KEYS[2] pending     ZSET  the queue's pending ids -> their entry's seq
-- KEYS[3] tasks       HASH  task id -> encoded task
-- KEYS[4] errors      HASH  task id -> last error
-- KEYS[5] outbox      HASH  task id -> packed entry (export.lua's format)
-- KEYS[6] epoch       STRING fencing epoch of the shard's owner
-- KEYS[7] stats       HASH  counters (stale_epoch)
-- KEYS[8] marker      STRING the shard's layout marker "gen|shards|from"
-- ARGV[1] caller's epoch
-- ARGV[2] the marker of the change the caller moves tasks for
-- ARGV[3..] pairs: an index in the ready list, the entry read there
--
-- Returns {code, outcome per pair}: code 1; -10 when ARGV[1] is older than
-- the stored epoch; -11 when the marker is not ARGV[2] (nothing written
-- either way). Outcome: the packed outbox entry of a task taken, "" for
-- an entry left (moved or popped meanwhile). Ready tasks are not in the
-- counts hash, so the counts do not change here; import.lua counts the
-- task scheduled in its new shard.
local qn = queue_names(KEYS[3])
local ok, stored = fence(KEYS[6], KEYS[7], ARGV[1])
if not ok then return {-10, stored} end
if redis.call("GET", KEYS[8]) ~= ARGV[2] then return {-11, 0} end
queues_here(qn) -- the names are read between writes below
local now = now_ms()
local tomb = "|exported"
local out, taken = {1}, 0
for i = 3, #ARGV, 2 do
  local idx, entry = ARGV[i], ARGV[i + 1]
  local res = ""
  if redis.call("LINDEX", KEYS[1], idx) == entry then
    local seq, id = ready_entry(entry)
    local blob = id and redis.call("HGET", KEYS[3], id)
    local pend = id and redis.call("ZSCORE", KEYS[2], id)
    if blob and pend and tonumber(pend) == seq then
      redis.call("LSET", KEYS[1], idx, tomb)
      redis.call("ZREM", KEYS[2], id)
      local last = redis.call("HGET", KEYS[4], id) or ""
      redis.call("HDEL", KEYS[3], id)
      redis.call("HDEL", KEYS[4], id)
      local t = decode(blob, qn)
      res = cmsgpack.pack({"d", t and t.due or now, blob, "", last})
      redis.call("HSET", KEYS[5], id, res)
      taken = taken + 1
    end
  end
  out[#out + 1] = res
end
if taken > 0 then redis.call("LREM", KEYS[1], taken, tomb) end
return out
