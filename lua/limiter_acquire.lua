-- limiter_acquire.lua: take a slot of a cluster-wide limit. Holders whose
-- lease lapsed (a dead process stops renewing) are dropped first, so a slot
-- frees itself with no cleanup job. A holder evicted by `replace` is marked
-- in the evicted set until its marker lapses, so its renew learns it.
-- A refused request that names a `waiter` (a run of a keyed limit going back
-- to its queue with a long fallback delay) is registered in the waiters set
-- in the same call, atomically with the refusal: a holder that gives its slot
-- back after this call finds it there (limiter_release.lua pops it), so no
-- wake can fall between "slot busy" and "waiting". The entry is kept until its
-- job's fallback instant (its score), when the job comes back on its own.
-- Slots freed here by dropping lapsed holders wake that many waiters too
-- (as many as stay free after this take).
-- KEYS[1] limit        ZSET   holder -> lease expiry (ms, server clock)
-- KEYS[2] evicted      ZSET   evicted holder -> when its marker lapses (ms)
-- KEYS[3] waiters      ZSET   waiter entry -> its fallback instant (ms), oldest first
-- ARGV[1] holder           str   who takes the slot (one run of one job)
-- ARGV[2] limit            int   most holders at once
-- ARGV[3] lease_ms         int   how long the slot is held without renewal
-- ARGV[4] mode             str   take | replace (evict the holder renewed longest ago)
-- ARGV[5] waiter           str   '' = none; else registered when refused (where the job lives)
-- ARGV[6] waiter_ms        int   how long the waiter entry is kept (the job's fallback delay)
-- ARGV[7] waiters_cap      int   most waiter entries per limit (over it: plain refusal)
-- Returns: {code, evicted, woken waiter entries...}; code CODE_TAKEN (or
--          already held), CODE_EVICTED (taken by evicting `evicted`),
--          CODE_NO_SLOT, CODE_WAITING (refused, registered as a waiter)
-- Sent again: a holder given a slot holds it: CODE_TAKEN again (its lease from the second run's
-- clock) but no waiter entries: those the first run popped are not answered again (their jobs
-- come back at their fallback). A replace answers CODE_TAKEN with no evicted holder (one was
-- evicted, once). A waiter is registered again (its fallback from the second run): CODE_WAITING.
-- CODE_NO_SLOT answers as before.
local CODE_NO_SLOT, CODE_TAKEN, CODE_EVICTED, CODE_WAITING = 0, 1, 2, 3
local limit_key, evicted_key, waiters_key = KEYS[1], KEYS[2], KEYS[3]
local holder, limit, lease_ms, mode = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local waiter, waiter_ms, waiters_cap = ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])

local now = now_ms()
local until_ms = int(now + lease_ms)
local lapsed = redis.call('ZREMRANGEBYSCORE', limit_key, '-inf', int(now))
redis.call('ZREMRANGEBYSCORE', evicted_key, '-inf', int(now))
if redis.call('ZSCORE', limit_key, holder) or redis.call('ZCARD', limit_key) < limit then
  redis.call('ZADD', limit_key, until_ms, holder)
  -- every holder lapses by until_ms: a limit nobody renews (per-key limits,
  -- whose holders died) goes with its last holder instead of staying for ever
  redis.call('PEXPIRE', limit_key, lease_ms)
  redis.call('ZREM', evicted_key, holder)
  local reply = {CODE_TAKEN, ''}
  local free = math.min(lapsed, limit - redis.call('ZCARD', limit_key))
  if free > 0 and redis.call('EXISTS', waiters_key) == 1 then
    -- slots a dead holder kept: wake as many waiters as stay free
    pop_waiters(waiters_key, now, free, reply)
  end
  return reply
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
if waiter ~= '' and waiter_ms > 0 then
  redis.call('ZREMRANGEBYSCORE', waiters_key, '-inf', int(now))
  if redis.call('ZSCORE', waiters_key, waiter) or
     redis.call('ZCARD', waiters_key) < waiters_cap then
    redis.call('ZADD', waiters_key, int(now + waiter_ms), waiter)
    -- the set goes with its last entry's fallback instant: an idle key costs nothing
    local last = redis.call('ZRANGE', waiters_key, -1, -1, 'WITHSCORES')
    redis.call('PEXPIRE', waiters_key, math.max(1, tonumber(last[2]) - now))
    return {CODE_WAITING, ''}
  end
end
return {CODE_NO_SLOT, ''}
