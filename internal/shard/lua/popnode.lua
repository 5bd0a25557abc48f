#!lua flags=allow-cross-slot-keys,allow-oom
-- popnode.lua: pop ready entries from the first non-empty of several ready
-- lists of one Redis Cluster node, whose keys may lie in several hash
-- slots. A worker on a cluster cannot block on lists of several slots
-- (BLMPOP is CROSSSLOT there), so it calls this once per node, and when
-- every list was empty waits for a ready announcement (lib.lua's
-- ready_pushed) before it calls again. It changes nothing but the list it
-- pops from, as BLMPOP would.
--
-- allow-cross-slot-keys lets the script touch keys of several slots, all
-- on the node that runs it; allow-oom lets it run when Redis is out of
-- memory (a flagged script without it is refused then, and popping is
-- what frees memory: it only deletes). Only KEYS[1] is declared, to route the call: Redis Cluster
-- refuses declared keys of several slots even with the flag.
--
-- KEYS[1] one ready list of the node (routes the call; popped only if it
--         is also in ARGV)
-- ARGV[1] count: most entries to pop, 1 or more
-- ARGV[2..] ready-list keys, in the order to try
--
-- Returns {key, {entries...}} for the first list with entries (LPOP key
-- count: at most count entries, from its head), or, when none had any,
-- {"", {}, key_1, error_1, ...}: the keys whose LPOP failed, with Redis's
-- error. "Script attempted to access a non local key" means this node no
-- longer serves the key (its slot moved, or is being migrated and the key
-- is elsewhere): the caller looks it up on its new node. Any other error
-- (a key of another type written by hand) skips that key only.
local failed = {}
for i = 2, #ARGV do
  local r = redis.pcall("LPOP", ARGV[i], ARGV[1])
  if type(r) == "table" then
    if r.err then
      failed[#failed + 1] = ARGV[i]
      failed[#failed + 1] = r.err
    else
      return {ARGV[i], r}
    end
  end
end
return {"", {}, unpack(failed)}
