-- limiter_renew.lua: extend the slots this worker holds in one limit.
-- KEYS[1] limit        ZSET   holder -> lease expiry (ms, server clock)
-- ARGV[1] lease_ms         int   new lease from now
-- ARGV[2..] holder ids
-- Returns: per holder 1 renewed, 0 gone (evicted by replace, or lapsed and taken)
local limit_key = KEYS[1]
local lease_ms = tonumber(ARGV[1])

local until_ms = int(now_ms() + lease_ms)
local reply = {}
for i = 2, #ARGV do
  if redis.call('ZSCORE', limit_key, ARGV[i]) then
    redis.call('ZADD', limit_key, until_ms, ARGV[i])
    reply[#reply + 1] = 1
  else
    reply[#reply + 1] = 0
  end
end
return reply
