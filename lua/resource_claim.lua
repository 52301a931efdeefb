-- resource_claim.lua: a reconciler takes the closing of a ledger entry whose
-- owner run is no longer live, for lease_ms: while it closes, no other
-- reconciler closes it and no run re-opens the key. A closer that dies lets
-- the claim lapse, and the next one closes again (close functions must be
-- idempotent). Fenced by the owner the caller saw.
-- KEYS[1] entry        HASH   see resource_open.lua
-- ARGV[1] queue            str   the owner the caller saw: physical queue,
-- ARGV[2] job              str   job id,
-- ARGV[3] token            int   and fencing token
-- ARGV[4] closer           str   who closes it
-- ARGV[5] lease_ms         int   how long the claim holds
-- Returns: {code, wait_ms}; CODE_CLAIMED (close it, then resource_clear),
--          CODE_BUSY (another closer holds it for wait_ms), CODE_GONE (the
--          entry is gone or belongs to another run now: leave it)
-- Sent again: the same answer: the entry names this closer, so the second run answers
-- CODE_CLAIMED again and sets its claim again, closing_until from the second run's clock.
local CODE_GONE, CODE_CLAIMED, CODE_BUSY = 0, 1, 2
local entry_key = KEYS[1]
local queue, job, token, closer = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local lease_ms = tonumber(ARGV[5])

local now = now_ms()
local e = redis.call('HMGET', entry_key, 'queue', 'job', 'token', 'closer', 'closing_until')
if not e[2] or e[1] ~= queue or e[2] ~= job or e[3] ~= token then
  return {CODE_GONE, 0}
end
local until_ms = tonumber(e[5]) or 0
if (e[4] or '') ~= '' and e[4] ~= closer and until_ms > now then
  return {CODE_BUSY, int(until_ms - now)}
end
redis.call('HSET', entry_key, 'closer', closer, 'closing_until', int(now + lease_ms))
return {CODE_CLAIMED, 0}
