-- breaker_force.lua: an operator forces a breaker open (it stays open,
-- letting no probe through, until forced closed) or closed (back to normal:
-- closed, no failures counted, cooldown back to base). Idempotent.
-- KEYS[1] state        HASH   see breaker_check.lua
-- KEYS[2] failures     ZSET   failure id -> instant (ms, server clock)
-- KEYS[3] index        SET    names of the breakers of this limiter prefix
-- KEYS[4] events       STREAM transitions of every breaker of the prefix
-- ARGV[1] name             str   the breaker
-- ARGV[2] mode             str   open | closed
-- ARGV[3] cooldown_ms      int   the base cooldown
-- ARGV[4] who              str   recorded in the audit trail
-- ARGV[5] events_maxlen    int   cap of the events stream, 0 = no trail
-- Returns: CODE_CHANGED, or CODE_UNCHANGED (it was so already)
-- Sent again: the breaker is forced so already, so the second run writes nothing (no second
-- trip, no second event) and answers CODE_UNCHANGED where the first answered CODE_CHANGED.
local CODE_UNCHANGED, CODE_CHANGED = 0, 1
local state_key, failures_key, index_key, events_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local name, mode, cooldown_ms, who = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local events_maxlen = tonumber(ARGV[5])

local now = now_ms()
redis.call('SADD', index_key, name)
local s = redis.call('HMGET', state_key, 'state', 'forced')
if mode == 'open' then
  if s[2] == 'open' then
    return CODE_UNCHANGED
  end
  breaker_open(state_key, failures_key, now, cooldown_ms)
  redis.call('HSET', state_key, 'forced', 'open')
  breaker_event(events_key, events_maxlen, name, 'forced-open', who)
  return CODE_CHANGED
end
if (s[1] or 'closed') == 'closed' and (s[2] or '') == '' then
  return CODE_UNCHANGED
end
redis.call('DEL', failures_key)
redis.call('HSET', state_key, 'state', 'closed', 'forced', '', 'until_ms', 0,
           'cooldown_ms', int(cooldown_ms), 'probe', '', 'probe_until', 0, 'changed_ms', int(now))
breaker_event(events_key, events_maxlen, name, 'forced-closed', who)
return CODE_CHANGED
