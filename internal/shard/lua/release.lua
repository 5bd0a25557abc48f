-- release.lua: give a delivery back without counting an attempt (the
-- worker is shutting down); the task is ready again at once.
--
-- Task data of encoding version 2 names its queue by number: the script
-- reads the name from the shard's queues hash ({tag}:queues, not
-- declared, in the shard's slot; lib.lua's queue_name), and fails with
-- "TRYAGAIN ...", nothing written, while that hash is not on the node.
--
-- KEYS[1] inflight   ZSET  task id -> lease deadline ms
-- KEYS[2] leases     HASH  task id -> delivery token
-- KEYS[3] seq        STRING sequence counter
-- KEYS[4] pending    ZSET  pending ids of the task's queue
-- KEYS[5] ready      LIST  ready list of the task's queue
-- KEYS[6] tasks      HASH  task id -> encoded task
-- KEYS[7] counts     HASH  task counts (see lib.lua's count)
-- ARGV[1] task id
-- ARGV[2] delivery token (a lease's, or the number of the popped entry of
--         a task run without a lease yet)
--
-- Returns 1 when released, 0 when the token is stale.
-- Publishes: on channel KEYS[5] when the ready list was empty (lib.lua's
-- ready_pushed).
local qn = queue_names(KEYS[6])
-- Read before anything is written (lib.lua's queue_name may fail).
local blob = redis.call("HGET", KEYS[6], ARGV[1])
local queue = blob_queue(blob, qn)
local ended = end_delivery(KEYS[1], KEYS[2], KEYS[4], ARGV[1], ARGV[2])
if not ended then
  return 0
end
if ended == "lease" then count(KEYS[7], "l", queue, -1) end
make_ready(KEYS[3], KEYS[4], KEYS[5], ARGV[1], blob or "")
return 1
