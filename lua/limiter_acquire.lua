-- limiter_acquire.lua: take a slot of a cluster-wide limit. Holders whose
-- lease lapsed (a dead process stops renewing) are dropped first, so a slot
-- frees itself with no cleanup job.
-- KEYS[1] limit        ZSET   holder -> lease expiry (ms, server clock)
-- ARGV[1] holder           str   who takes the slot (one run of one job)
-- ARGV[2] limit            int   most holders at once
-- ARGV[3] lease_ms         int   how long the slot is held without renewal
-- ARGV[4] mode             str   take | replace (evict the holder renewed longest ago)
-- Returns: {code, evicted}; code 1 taken (or already held), 2 taken by
--          evicting `evicted`, 0 no slot free
local limit_key = KEYS[1]
local holder, limit, lease_ms, mode = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]

local now = now_ms()
local until_ms = int(now + lease_ms)
redis.call('ZREMRANGEBYSCORE', limit_key, '-inf', int(now))
if redis.call('ZSCORE', limit_key, holder) or redis.call('ZCARD', limit_key) < limit then
  redis.call('ZADD', limit_key, until_ms, holder)
  return {1, ''}
end
if mode == 'replace' then
  local oldest = redis.call('ZRANGE', limit_key, 0, 0)[1]
  redis.call('ZREM', limit_key, oldest)
  redis.call('ZADD', limit_key, until_ms, holder)
  return {2, oldest}
end
return {0, ''}
