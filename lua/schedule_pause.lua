-- schedule_pause.lua: pause or resume a schedule. A paused schedule does not
-- fire (a pending fire is still confirmed); resuming moves its next fire to
-- the one the caller computed from the server clock, so a long pause does
-- not count as missed fires.
-- KEYS[1] state        HASH   schedule name -> next_ms|paused|pending_ms|pending_until_ms[|taker]
-- ARGV[1] name             str   the schedule's name
-- ARGV[2] paused           0|1   1 = pause, 0 = resume
-- ARGV[3] next_ms          int   on resume: the next fire (0 = keep the recorded one)
-- Returns: CODE_CHANGED, CODE_UNCHANGED (already so), CODE_MISSING, CODE_MALFORMED
-- Sent again: the schedule is paused (or resumed) already, so the second run writes nothing
-- and answers CODE_UNCHANGED where the first answered CODE_CHANGED.
local CODE_MALFORMED, CODE_MISSING, CODE_CHANGED, CODE_UNCHANGED = -1, 0, 1, 2
local state_key = KEYS[1]
local name = ARGV[1]
local paused = ARGV[2]
local next_ms = tonumber(ARGV[3])

local raw = redis.call('HGET', state_key, name)
if not raw then
  return CODE_MISSING
end
local s = parse_schedule(raw)
if not s then
  return CODE_MALFORMED
end
if s.paused == paused then
  return CODE_UNCHANGED
end
s.paused = paused
if paused == '0' and next_ms > 0 then
  s.next_ms = next_ms
end
save_schedule(state_key, name, s)
return CODE_CHANGED
