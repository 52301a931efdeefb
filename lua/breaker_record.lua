-- breaker_record.lua: the outcome of a call that passed the breaker. A
-- failure while closed is counted in the window and trips the breaker at the
-- threshold; the probe's failure re-opens it with a doubled cooldown (capped);
-- the probe's success closes it (cooldown back to base); `release` gives the
-- probe back with no verdict (the run did not get to call). Outcomes of
-- callers that are not the probe while the breaker is not closed change
-- nothing (they passed before it opened). Idempotent per failure id.
-- KEYS[1] state        HASH   see breaker_check.lua
-- KEYS[2] failures     ZSET   failure id -> instant (ms, server clock)
-- KEYS[3] index        SET    names of the breakers of this limiter prefix
-- KEYS[4] events       STREAM transitions of every breaker of the prefix
-- ARGV[1] name             str   the breaker
-- ARGV[2] holder           str   who reports (the holder it checked in with)
-- ARGV[3] outcome          str   failure | success | release
-- ARGV[4] failures         int   failures within the window that trip it
-- ARGV[5] window_ms        int   the window
-- ARGV[6] cooldown_ms      int   the base cooldown
-- ARGV[7] max_cooldown_ms  int   the longest cooldown
-- ARGV[8] events_maxlen    int   cap of the events stream, 0 = no trail
-- Returns: {code, detail}; code CODE_NOTED (nothing changed state),
--          CODE_OPENED (tripped; detail: cooldown ms), CODE_REOPENED (the probe
--          failed; detail: the new cooldown ms), CODE_CLOSED (the probe succeeded)
-- Sent again: nothing is counted twice. A failure while closed that did not trip is the same
-- member of the failures set (its instant moved to the second run's clock): CODE_NOTED again.
-- A trip, a re-open or a close is not repeated (the breaker is open with no probe, or closed;
-- the cooldown is not doubled twice): the second run answers CODE_NOTED where the first
-- answered CODE_OPENED, CODE_REOPENED or CODE_CLOSED. A release answers CODE_NOTED both times.
local CODE_NOTED, CODE_OPENED, CODE_REOPENED, CODE_CLOSED = 0, 1, 2, 3
local state_key, failures_key, index_key, events_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local name, holder, outcome = ARGV[1], ARGV[2], ARGV[3]
local threshold, window_ms = tonumber(ARGV[4]), tonumber(ARGV[5])
local cooldown_ms, max_cooldown_ms = tonumber(ARGV[6]), tonumber(ARGV[7])
local events_maxlen = tonumber(ARGV[8])

local now = now_ms()
redis.call('SADD', index_key, name)
local s = redis.call('HMGET', state_key, 'state', 'probe', 'cooldown_ms', 'forced')
local state, probe = s[1] or 'closed', s[2] or ''
if s[4] == 'open' then
  return {CODE_NOTED, ''}
end
if state ~= 'closed' then
  if probe == '' or probe ~= holder then
    return {CODE_NOTED, ''}
  end
  if outcome == 'success' then
    redis.call('DEL', failures_key)
    redis.call('HSET', state_key, 'state', 'closed', 'until_ms', 0, 'cooldown_ms', int(cooldown_ms),
               'probe', '', 'probe_until', 0, 'changed_ms', int(now))
    breaker_event(events_key, events_maxlen, name, 'closed', 'probe ' .. holder .. ' succeeded')
    return {CODE_CLOSED, ''}
  end
  if outcome == 'release' then
    redis.call('HSET', state_key, 'probe', '', 'probe_until', 0)
    return {CODE_NOTED, ''}
  end
  local longer = math.min(max_cooldown_ms, 2 * (tonumber(s[3]) or cooldown_ms))
  breaker_open(state_key, failures_key, now, longer)
  breaker_event(events_key, events_maxlen, name, 'reopened',
                'probe ' .. holder .. ' failed; cooldown ' .. int(longer) .. ' ms')
  return {CODE_REOPENED, int(longer)}
end
if outcome ~= 'failure' then
  return {CODE_NOTED, ''}
end
redis.call('ZADD', failures_key, now, holder)
redis.call('ZREMRANGEBYSCORE', failures_key, '-inf', int(now - window_ms))
redis.call('PEXPIRE', failures_key, window_ms + 1000)
if redis.call('ZCARD', failures_key) < threshold then
  return {CODE_NOTED, ''}
end
breaker_open(state_key, failures_key, now, cooldown_ms)
breaker_event(events_key, events_maxlen, name, 'opened',
              threshold .. ' failures within ' .. int(window_ms) .. ' ms; cooldown ' ..
              int(cooldown_ms) .. ' ms')
return {CODE_OPENED, int(cooldown_ms)}
