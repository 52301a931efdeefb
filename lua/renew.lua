-- renew.lua: extend every held lease in one call; each renewal is fenced by
-- the job's token.
-- KEYS[1] leases       ZSET   leased ids, score = lease expiry ms
-- KEYS[2] jobs         HASH   id -> job record
-- KEYS[3] events       STREAM audit trail
-- KEYS[4] payloads     HASH   id -> payload envelope (the audit entry's correlation id)
-- ARGV[1] lease_ms         int   new lease duration from now
-- ARGV[2] events_maxlen    int   cap of the events stream, 0 = no trail
-- ARGV[3..] per job, 2 values: id, token
-- Returns: per job CODE_RENEWED, CODE_CANCEL_REQUESTED (renewed, but a cancel
--          was requested), CODE_LOST (token stale, or the job is no longer leased)
-- Sent again: the same answer per job; a renewed lease is set again from the second run's
-- clock, and a job answered CODE_LOST gets a second 'renew-lost' entry in the audit trail.
local CODE_LOST, CODE_RENEWED, CODE_CANCEL_REQUESTED = 0, 1, 2
local leases_key, jobs_key, events_key, payloads_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local lease_ms = tonumber(ARGV[1])
local events_maxlen = tonumber(ARGV[2])

local now = now_ms()
local until_ms = int(now + lease_ms)
local reply = {}
for base = 3, #ARGV, 2 do
  local id, token = ARGV[base], tonumber(ARGV[base + 1])
  local meta = load_meta(jobs_key, id)
  if meta and meta.state == 'leased' and tonumber(meta.token) == token then
    redis.call('ZADD', leases_key, until_ms, id)
    if meta.cancel == '1' then
      reply[#reply + 1] = CODE_CANCEL_REQUESTED
    else
      reply[#reply + 1] = CODE_RENEWED
    end
  else
    emit(events_key, events_maxlen, id, 'renew-lost', tostring(token), 'worker', jobs_key,
         payloads_key)
    reply[#reply + 1] = CODE_LOST
  end
end
return reply
