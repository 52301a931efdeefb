-- limiter_release.lua: give slots back (and drop their eviction markers), and
-- pop one waiter per slot freed (registered by limiter_acquire.lua when it
-- refused a run of a keyed limit): the caller wakes each on the waiter's own
-- queue (lua/wake.lua). Entries past their fallback instant are dropped, not
-- returned (their jobs came back on their own). Idempotent.
-- KEYS[1] limit        ZSET   holder -> lease expiry (ms, server clock)
-- KEYS[2] evicted      ZSET   evicted holder -> when its marker lapses (ms)
-- KEYS[3] waiters      ZSET   waiter entry -> its fallback instant (ms), oldest first
-- ARGV[1..] holder ids
-- Returns: {how many holders were removed from the limit, woken waiter entries...}
-- Sent again: the holders are gone, so the second run removes nothing and answers {0} with no
-- waiter entries, where the first answered its count and the entries it popped: those waiters
-- are not woken by this caller, and their jobs come back at their fallback delay.
local limit_key, evicted_key, waiters_key = KEYS[1], KEYS[2], KEYS[3]

local removed = 0
for i = 1, #ARGV do
  removed = removed + redis.call('ZREM', limit_key, ARGV[i])
  redis.call('ZREM', evicted_key, ARGV[i])
end
local reply = {removed}
if removed > 0 and redis.call('EXISTS', waiters_key) == 1 then
  pop_waiters(waiters_key, now_ms(), removed, reply)
end
return reply
