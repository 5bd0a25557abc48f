-- succeed.lua: one delivery succeeded in a queue that keeps records of
-- its ended tasks: ack.lua's check of the token, then the task's final
-- state "succeeded" and its result are kept for the queue's retention
-- (lib.lua's record_end), and published for Client.Wait. A queue that
-- keeps no records (any more) is acknowledged as by ack.lua, the result
-- dropped.
--
-- Task data of encoding version 2 names its queue by number: the script
-- reads the name from the shard's queues hash ({tag}:queues, not
-- declared, in the shard's slot; lib.lua's queue_name), and fails with
-- "TRYAGAIN ...", nothing written, while that hash is not on the node.
--
-- KEYS[1] tasks      HASH  task id -> encoded task
-- KEYS[2] inflight   ZSET  task id -> lease deadline ms
-- KEYS[3] leases     HASH  task id -> delivery token
-- KEYS[4] errors     HASH  task id -> last error
-- KEYS[5] counts     HASH  task counts (see lib.lua's count)
-- KEYS[6] queues     HASH  queue -> policy; "|keep|<queue>" -> retention
-- ARGV[1] pending key prefix of this shard (the queue name is appended)
-- ARGV[2] task id
-- ARGV[3] delivery token
-- ARGV[4] queue of a delivery run without a lease, "" for a leased one
--         (as in ack.lua's triples)
-- ARGV[5] the handler's result (may be empty)
-- ARGV[6] ended HASH of this shard: task id -> "state|at_ms|was|queue|result"
-- ARGV[7] ended index prefix of this shard (the queue name is appended):
--         ZSET task id -> ms
-- ARGV[8] prefix of the task's done channel (the id is appended)
--   (the pending set, the ended hash and the index are not declared: the
--   script checks that this node serves them before it writes, see
--   lib.lua's served_here)
--
-- Returns 1 when acknowledged (and recorded when the queue keeps records),
-- 0 when the token is not the task's current one (nothing changed); or
-- the error "TRYAGAIN ...", nothing written, while the shard's slot is
-- being migrated and a key it names is not on this node.
local qn = queue_names(KEYS[1])
local id = ARGV[2]
local blob = redis.call("HGET", KEYS[1], id)
local queue = blob_queue(blob, qn)
local keep = queue ~= "" and keep_of(KEYS[6], queue)
local pk = ARGV[4] ~= "" and ARGV[1] .. ARGV[4] or nil
local undeclared = {}
if pk then undeclared[#undeclared + 1] = pk end
if keep then
  undeclared[#undeclared + 1] = ARGV[6]
  undeclared[#undeclared + 1] = ARGV[7] .. queue
end
local moving = served_here(KEYS[1], undeclared)
if moving then return moving end
local ended = end_delivery(KEYS[2], KEYS[3], pk, id, ARGV[3])
if not ended then
  return 0
end
if ended == "lease" then
  count(KEYS[5], "l", queue, -1)
end
redis.call("HDEL", KEYS[1], id)
redis.call("HDEL", KEYS[4], id)
if keep then
  tally(KEYS[5], "result")
  record_end(ARGV[6], ARGV[7] .. queue, KEYS[6], ARGV[8] .. id, id, "succeeded", "active", queue, ARGV[5], keep, now_ms())
end
return 1
