-- fairrefill.lua: top a fair queue's ready list (its window) up from its
-- keys' lists, in turns (lib.lua's fair_refill; docs/fairness.md). A
-- worker sends it after it popped entries of a fair queue, so that the
-- window is refilled at the pace workers take from it; the mover and the
-- recovery pass refill it too.
--
-- KEYS[1] ring     LIST  the keys with waiting tasks (Keys.FairRing)
-- KEYS[2] seq      STRING the shard's sequence counter
-- KEYS[3] pending  ZSET  the queue's pending ids -> their entry's number
-- KEYS[4] ready    LIST  the queue's ready list
-- KEYS[5] queues   HASH  field "|fair|<queue>": the window; ARGV[1] when
--                        the queue is no longer fair (its workers stop
--                        calling this; recovery drains its keys' lists)
-- KEYS[6] weights  HASH  key -> turns per round (Keys.FairWeights)
-- KEYS[7] turn     STRING "left|key" (Keys.FairTurn)
-- KEYS[8] parked   HASH  keys whose due run the mover left in the delayed
--                        set (Keys.FairParked); a refill that brings one's
--                        list low wakes the owner on "<tag>:wake"
-- KEYS[9] caps     HASH  key -> its own concurrency cap (Keys.FairCaps)
-- KEYS[10] held    SET   keys held at their cap or out of tokens, off the
--                        ring (Keys.FairHeld); the keys' own rates
--                        (Keys.FairRates), their token buckets and the
--                        shard's fairwake set (a held key's wake-up,
--                        lib.lua's fair_hold) and the keys' levels
--                        (Keys.FairLevels) are not declared
-- ARGV[1] the default window
-- ARGV[2..] ids of the queue's tasks that a worker settled (acked,
--   retried or buried), whose permits are given back, or "{key}" to name a
--   key without giving anything back (inspect after a change of a key's
--   cap; "{}" for the tasks without a key): a key held at its concurrency
--   cap ("<tag>:fairb:<q>") that has a permit free now goes back on the
--   ring first (lib.lua's fair_release). The keys' permit sets
--   (Keys.FairPermits) and lists are not declared, and checked.
--
-- Returns the number of entries added to the window (0 when the ring is
-- empty or the window full). Fails with "TRYAGAIN ...", nothing written,
-- while the shard's slot is being migrated and a declared key is not on
-- this node; a key's list that is not ends the refill (fair_refill).
local moving = served_here(KEYS[1], {KEYS[3], KEYS[4], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10],
  fair_parts(KEYS[1]) .. ":inflight", fair_parts(KEYS[1]) .. ":fairwake", fair_sibling(KEYS[1], "q"), fair_sibling(KEYS[1], "v")})
if moving then return moving end
if #ARGV > 1 then fair_release(KEYS[1], {unpack(ARGV, 2)}, KEYS[3]) end
if redis.call("LLEN", KEYS[1]) == 0 and redis.call("EXISTS", KEYS[10]) == 0 then return 0 end
local _, q = fair_parts(KEYS[1])
local window = fair_window(KEYS[5], q) or tonumber(ARGV[1])
return fair_refill(KEYS[1], KEYS[2], KEYS[3], KEYS[4], window)
