-- limiter_renew.lua: extend the slots this worker holds in one limit, and
-- tell each holder evicted by a `replace` that it was, for as long as its
-- marker stays (until its run releases it, or the marker lapses): a call
-- sent again after its reply was lost answers EVICTED again, where taking
-- the marker on the first answer made the second LOST, and the replaced
-- run was failed and run again instead of canceled (found by a review,
-- 2026-12-07).
-- KEYS[1] limit        ZSET   holder -> lease expiry (ms, server clock)
-- KEYS[2] evicted      ZSET   evicted holder -> when its marker lapses (ms)
-- ARGV[1] lease_ms         int   new lease from now
-- ARGV[2..] holder ids
-- Returns: per holder CODE_RENEWED (in the limit), CODE_EVICTED (evicted by a
--          replace; the marker stays), CODE_LOST (neither: lapsed and pruned)
-- Sent again: the same answer per holder; a renewed holder's lease is set again from the
-- second run's clock, and an evicted holder's marker stays (CODE_EVICTED again).
local CODE_LOST, CODE_RENEWED, CODE_EVICTED = 0, 1, 2
local limit_key, evicted_key = KEYS[1], KEYS[2]
local lease_ms = tonumber(ARGV[1])

local until_ms = int(now_ms() + lease_ms)
local reply = {}
for i = 2, #ARGV do
  if redis.call('ZSCORE', limit_key, ARGV[i]) then
    redis.call('ZADD', limit_key, until_ms, ARGV[i])
    reply[#reply + 1] = CODE_RENEWED
  elseif redis.call('ZSCORE', evicted_key, ARGV[i]) then
    reply[#reply + 1] = CODE_EVICTED
  else
    reply[#reply + 1] = CODE_LOST
  end
end
if redis.call('EXISTS', limit_key) == 1 then
  redis.call('PEXPIRE', limit_key, lease_ms)  -- every holder lapses by until_ms
end
return reply
