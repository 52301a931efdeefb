-- schedule_fire.lua: take one fire of a schedule, checked on the server
-- clock: the schedule must be due (next_ms <= now), not paused, and still at
-- the next fire the caller read (another worker may have fired it). Moves the
-- next fire on and marks the fire pending until the caller confirms its
-- enqueue (schedule_done); a pending fire whose worker died is handed to the
-- next caller after its lease, so a fire is never lost to a crash between
-- this script and the enqueue (the enqueue dedups by the fire's job id).
-- KEYS[1] state        HASH   schedule name -> next_ms|paused|pending_ms|pending_until_ms[|taker]
-- ARGV[1] name             str   the schedule's name
-- ARGV[2] expected_ms      int   the next fire the caller read
-- ARGV[3] next_ms          int   the fire after this one (caller computed, from the server clock)
-- ARGV[4] fire_ms          int   the instant to fire, in [expected_ms, now];
--                                0 = fire nothing (missed fires skipped)
-- ARGV[5] lease_ms         int   how long the caller has to confirm its enqueue
-- ARGV[6] taker            str   the calling scheduler's id (its worker's id and a nonce),
--                                recorded with a fire it takes
-- Returns: {code, fire_ms, now_ms}; code CODE_FIRED (enqueue fire_ms, then
--          schedule_done), CODE_SKIPPED (next fire moved, nothing to fire),
--          CODE_RETRY (enqueue the pending fire_ms of a worker that died),
--          CODE_NOT_DUE, CODE_MOVED (fired by another worker), CODE_PAUSED,
--          CODE_BUSY (another worker's fire is pending; this worker's own
--          is answered as it was taken, see below), CODE_STALE (next_ms is
--          not after now: recompute), CODE_MISSING, CODE_MALFORMED
-- Sent again: a fire the first run took (CODE_FIRED) or took over (CODE_RETRY) is pending under
-- its lease with this taker, so the second writes nothing and answers as the first did: CODE_FIRED
-- with the same fire when the pending fire and the next are those this call asked for, else
-- CODE_RETRY with the pending fire (the fire a take-over takes is never the one its caller asks
-- for: that is due after it). Another worker's call finds the fire busy. (Answered CODE_BUSY, the
-- caller enqueued nothing, and the fire waited out its lease, 10 s by default.) A skip answers
-- CODE_MOVED (next_ms moved on); every other answer writes nothing and comes again.
local CODE_MALFORMED, CODE_MISSING, CODE_FIRED, CODE_SKIPPED, CODE_RETRY = -1, 0, 1, 2, 3
local CODE_NOT_DUE, CODE_MOVED, CODE_PAUSED, CODE_BUSY, CODE_STALE = 4, 5, 6, 7, 8
local state_key = KEYS[1]
local name = ARGV[1]
local expected_ms = tonumber(ARGV[2])
local next_ms = tonumber(ARGV[3])
local fire_ms = tonumber(ARGV[4])
local lease_ms = tonumber(ARGV[5])
local taker = ARGV[6]

local raw = redis.call('HGET', state_key, name)
if not raw then
  return {CODE_MISSING, 0, int(now_ms())}
end
local s = parse_schedule(raw)
local now = now_ms()
if not s then
  return {CODE_MALFORMED, 0, int(now)}
end
if s.pending > 0 then
  if s.until_ms > now then
    if s.taker ~= taker or taker == '' then
      return {CODE_BUSY, int(s.pending), int(now)}
    end
    -- this worker's own fire: its call sent again after a lost reply
    if s.pending == fire_ms and s.next_ms == next_ms then
      return {CODE_FIRED, int(fire_ms), int(now)}
    end
    return {CODE_RETRY, int(s.pending), int(now)}
  end
  s.until_ms = now + lease_ms
  s.taker = taker
  save_schedule(state_key, name, s)
  return {CODE_RETRY, int(s.pending), int(now)}
end
if s.paused == '1' then
  return {CODE_PAUSED, 0, int(now)}
end
if s.next_ms ~= expected_ms then
  return {CODE_MOVED, int(s.next_ms), int(now)}
end
if s.next_ms > now then
  return {CODE_NOT_DUE, int(s.next_ms), int(now)}
end
if next_ms <= now then
  return {CODE_STALE, 0, int(now)}
end
if fire_ms ~= 0 and (fire_ms < expected_ms or fire_ms > now) then
  return redis.error_reply('schedule_fire: fire_ms ' .. ARGV[4] .. ' is outside [' ..
                           ARGV[2] .. ', ' .. int(now) .. ']')
end
s.next_ms = next_ms
if fire_ms == 0 then
  save_schedule(state_key, name, s)
  return {CODE_SKIPPED, 0, int(now)}
end
s.pending = fire_ms
s.until_ms = now + lease_ms
s.taker = taker
save_schedule(state_key, name, s)
return {CODE_FIRED, int(fire_ms), int(now)}
