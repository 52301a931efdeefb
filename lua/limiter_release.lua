-- limiter_release.lua: give slots back. Idempotent.
-- KEYS[1] limit        ZSET   holder -> lease expiry (ms, server clock)
-- ARGV[1..] holder ids
-- Returns: how many holders were removed
local limit_key = KEYS[1]

local removed = 0
for i = 1, #ARGV do
  removed = removed + redis.call('ZREM', limit_key, ARGV[i])
end
return removed
