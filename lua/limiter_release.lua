-- limiter_release.lua: give slots back (and drop their eviction markers). Idempotent.
-- KEYS[1] limit        ZSET   holder -> lease expiry (ms, server clock)
-- KEYS[2] evicted      ZSET   evicted holder -> when its marker lapses (ms)
-- ARGV[1..] holder ids
-- Returns: how many holders were removed from the limit
local limit_key, evicted_key = KEYS[1], KEYS[2]

local removed = 0
for i = 1, #ARGV do
  removed = removed + redis.call('ZREM', limit_key, ARGV[i])
  redis.call('ZREM', evicted_key, ARGV[i])
end
return removed
