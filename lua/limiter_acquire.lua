-- limiter_acquire.lua: take a slot of a cluster-wide limit. Holders whose
-- lease lapsed (a dead process stops renewing) are dropped first, so a slot
-- frees itself with no cleanup job. A holder evicted by `replace` is marked
-- in the evicted set until its marker lapses, so its renew learns it.
-- KEYS[1] limit        ZSET   holder -> lease expiry (ms, server clock)
-- KEYS[2] evicted      ZSET   evicted holder -> when its marker lapses (ms)
-- ARGV[1] holder           str   who takes the slot (one run of one job)
-- ARGV[2] limit            int   most holders at once
-- ARGV[3] lease_ms         int   how long the slot is held without renewal
-- ARGV[4] mode             str   take | replace (evict the holder renewed longest ago)
-- Returns: {code, evicted}; code CODE_TAKEN (or already held), CODE_EVICTED
--          (taken by evicting `evicted`), CODE_NO_SLOT
local CODE_NO_SLOT, CODE_TAKEN, CODE_EVICTED = 0, 1, 2
local limit_key, evicted_key = KEYS[1], KEYS[2]
local holder, limit, lease_ms, mode = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]

local now = now_ms()
local until_ms = int(now + lease_ms)
redis.call('ZREMRANGEBYSCORE', limit_key, '-inf', int(now))
redis.call('ZREMRANGEBYSCORE', evicted_key, '-inf', int(now))
if redis.call('ZSCORE', limit_key, holder) or redis.call('ZCARD', limit_key) < limit then
  redis.call('ZADD', limit_key, until_ms, holder)
  -- every holder lapses by until_ms: a limit nobody renews (per-key limits,
  -- whose holders died) goes with its last holder instead of staying for ever
  redis.call('PEXPIRE', limit_key, lease_ms)
  redis.call('ZREM', evicted_key, holder)
  return {CODE_TAKEN, ''}
end
if mode == 'replace' then
  local oldest = redis.call('ZRANGE', limit_key, 0, 0)[1]
  redis.call('ZREM', limit_key, oldest)
  redis.call('ZADD', evicted_key, until_ms, oldest)
  redis.call('PEXPIRE', evicted_key, lease_ms)
  redis.call('ZADD', limit_key, until_ms, holder)
  redis.call('PEXPIRE', limit_key, lease_ms)
  redis.call('ZREM', evicted_key, holder)
  return {CODE_EVICTED, oldest}
end
return {CODE_NO_SLOT, ''}
