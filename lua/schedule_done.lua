-- schedule_done.lua: a worker confirms the enqueue of the fire it took
-- (schedule_fire): the pending fire is cleared, so the next one may come.
-- KEYS[1] state        HASH   schedule name -> next_ms|paused|pending_ms|pending_until_ms[|taker]
-- ARGV[1] name             str   the schedule's name
-- ARGV[2] fire_ms          int   the fire whose job is enqueued
-- Returns: CODE_DONE, or CODE_NOT_PENDING (not this fire: already confirmed
--          by a worker that took it over), CODE_MALFORMED, CODE_MISSING
-- Sent again: the first run cleared the pending fire, so the second writes nothing and answers
-- CODE_NOT_PENDING where the first answered CODE_DONE.
local CODE_MALFORMED, CODE_MISSING, CODE_DONE, CODE_NOT_PENDING = -1, 0, 1, 2
local state_key = KEYS[1]
local name = ARGV[1]
local fire_ms = tonumber(ARGV[2])

local raw = redis.call('HGET', state_key, name)
if not raw then
  return CODE_MISSING
end
local s = parse_schedule(raw)
if not s then
  return CODE_MALFORMED
end
if s.pending ~= fire_ms then
  return CODE_NOT_PENDING
end
s.pending = 0
s.until_ms = 0
save_schedule(state_key, name, s)
return CODE_DONE
