-- breaker_check.lua: may a run that needs this breaker start now? Closed:
-- yes. Open: no, until its cooldown ends. Once the cooldown ended (half-open)
-- exactly one caller becomes the probe, under a lease so that a probe that
-- crashed does not wedge the breaker: the others wait. Forced open: no.
-- KEYS[1] state        HASH   state, until_ms, cooldown_ms, probe, probe_until, forced,
--                             trips, changed_ms
-- KEYS[2] index        SET    names of the breakers of this limiter prefix
-- KEYS[3] events       STREAM transitions of every breaker of the prefix
-- ARGV[1] name             str   the breaker
-- ARGV[2] holder           str   who asks (one run, or one guarded call)
-- ARGV[3] probe_lease_ms   int   how long a probe holds the half-open breaker
-- ARGV[4] cooldown_ms      int   the breaker's base cooldown (a forced-open wait)
-- ARGV[5] events_maxlen    int   cap of the events stream, 0 = no trail
-- Returns: {code, wait_ms}; code CODE_CLOSED (go), CODE_PROBE (go: this caller
--          is the half-open probe), CODE_OPEN (wait wait_ms, then ask again)
-- Sent again: the same answer, nothing written twice. A holder the first run made the probe
-- finds itself the probe and answers CODE_PROBE again, with no second write or event; closed,
-- forced open and open answer as before (an open wait counted from the second run's clock).
local CODE_CLOSED, CODE_PROBE, CODE_OPEN = 0, 1, 2
local state_key, index_key, events_key = KEYS[1], KEYS[2], KEYS[3]
local name, holder = ARGV[1], ARGV[2]
local probe_lease_ms, cooldown_ms = tonumber(ARGV[3]), tonumber(ARGV[4])
local events_maxlen = tonumber(ARGV[5])

local now = now_ms()
redis.call('SADD', index_key, name)
local s = redis.call('HMGET', state_key, 'state', 'until_ms', 'probe', 'probe_until', 'forced')
local state = s[1] or 'closed'
if s[5] == 'open' then
  return {CODE_OPEN, cooldown_ms}
end
if state == 'closed' then
  return {CODE_CLOSED, 0}
end
local until_ms = tonumber(s[2]) or 0
if state == 'open' and now < until_ms then
  return {CODE_OPEN, int(until_ms - now)}
end
local probe, probe_until = s[3] or '', tonumber(s[4]) or 0
if probe == holder then
  return {CODE_PROBE, 0}
end
if probe == '' or probe_until <= now then
  redis.call('HSET', state_key, 'state', 'half-open', 'probe', holder,
             'probe_until', int(now + probe_lease_ms), 'changed_ms', int(now))
  local why = 'cooldown over'
  if probe ~= '' then
    why = 'the last probe lapsed'
  end
  breaker_event(events_key, events_maxlen, name, 'half-open', holder .. ' probes (' .. why .. ')')
  return {CODE_PROBE, 0}
end
return {CODE_OPEN, int(math.max(1, math.min(probe_until - now, cooldown_ms)))}
