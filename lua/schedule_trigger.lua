-- schedule_trigger.lua: "run now" — the server-clock instant of a manual
-- fire of a recorded schedule (paused or not); the caller enqueues
-- schedule:<name>:manual:<now_ms>, an id no regular fire uses. The next
-- regular fire is not moved.
-- KEYS[1] specs        HASH   schedule name -> spec JSON
-- ARGV[1] name             str   the schedule's name
-- Returns: {code, now_ms, spec}; code CODE_TRIGGERED or CODE_MISSING (spec false)
-- Sent again: reads only: the same answer as a first run at that moment (its now_ms, and so
-- the manual fire's job id, is the second run's).
local CODE_MISSING, CODE_TRIGGERED = 0, 1
local specs_key = KEYS[1]
local name = ARGV[1]

local spec = redis.call('HGET', specs_key, name)
if not spec then
  return {CODE_MISSING, int(now_ms()), false}
end
return {CODE_TRIGGERED, int(now_ms()), spec}
