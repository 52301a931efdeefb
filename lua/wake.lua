-- wake.lua: wake jobs that wait for a keyed concurrency slot. A run refused
-- its key's slot goes back to its queue scheduled after a long fallback
-- delay, and limiter_acquire.lua registered it as a waiter of the key in the
-- limiter's keyspace (maybe another Redis); a worker that gives a slot of the
-- key back gets the popped waiter entries from limiter_release.lua and calls
-- this on each entry's own queue, through its App's queue connection. Fenced
-- by the refused run's token, idempotent:
--   scheduled with that token: due now, moved to the ready set behind what
--     is queued (as a due scheduled job is promoted by claim);
--   leased with that token: the slot freed between the refusal and the
--     release of that run (it is still on its way back). A wake-pending mark
--     `<id>:<token>` is left in `woken`; release.lua consumes it and puts the
--     job in line at once instead of after the fallback. The mark is written
--     here, on the queue's Redis, where the release runs after it: whichever
--     of the two comes first, the job ends up ready (no lost wake);
--   anything else (queued, another run's token, ended, missing): nothing.
-- A wake that never comes (a lost reply, a crashed releaser, another
-- service's prefix) costs the waiting job its fallback delay, nothing more.
-- KEYS[1] jobs         HASH   id -> job record
-- KEYS[2] ready        ZSET   claimable ids
-- KEYS[3] scheduled    ZSET   delayed ids
-- KEYS[4] stats        HASH   counters (seq: claim order)
-- KEYS[5] wake         LIST   wake-up tokens
-- KEYS[6] woken        ZSET   wake-pending marks `<id>:<token>` -> when marked (ms)
-- KEYS[7] events       STREAM audit trail
-- KEYS[8] payloads     HASH   id -> payload (the audit entry's correlation id)
-- KEYS[9] line         LIST   queued ids of priority 0, in claim order (_lib.lua, LINE_FLOOR)
-- ARGV[1] events_maxlen    int   cap of the events stream, 0 = no trail
-- ARGV[2] wake_cap         int   most wake tokens in the list
-- ARGV[3..] per job, 2 values: id, token (of the run the slot refused)
-- Returns: per job CODE_WOKEN (now ready), CODE_MARKED (still leased: its
--          release makes it ready), CODE_IGNORED (not waiting with that token)
-- Sent again: a job the first run woke is queued now, so the second writes nothing for it (no
-- second wake token) and answers CODE_IGNORED where the first answered CODE_WOKEN; a mark
-- (CODE_MARKED) is written again with the second run's instant; CODE_IGNORED stays so.
local CODE_IGNORED, CODE_WOKEN, CODE_MARKED = 0, 1, 2
local WOKEN_TTL_MS = 60000 -- a mark its release never consumed (a crash) goes after this
local jobs_key, ready_key, scheduled_key, stats_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local wake_key, woken_key, events_key, payloads_key = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local line_key = KEYS[9]
local events_maxlen, wake_cap = tonumber(ARGV[1]), tonumber(ARGV[2])

local now = now_ms()
local reply = {}
local woken = 0
for base = 3, #ARGV, 2 do
  local id, token = ARGV[base], tonumber(ARGV[base + 1])
  local meta = load_meta(jobs_key, id)
  local code = CODE_IGNORED
  if meta and token and tonumber(meta.token) == token then
    if meta.state == 'scheduled' and redis.call('ZREM', scheduled_key, id) == 1 then
      requeue_behind(meta, id, now, 0, ready_key, scheduled_key, line_key, stats_key)
      save_meta(jobs_key, id, meta)
      emit(events_key, events_maxlen, id, 'woken', 'slot freed', 'limiter', jobs_key, payloads_key)
      woken = woken + 1
      code = CODE_WOKEN
    elseif meta.state == 'leased' then
      redis.call('ZREMRANGEBYSCORE', woken_key, '-inf', int(now - WOKEN_TTL_MS))
      redis.call('ZADD', woken_key, int(now), id .. ':' .. int(token))
      redis.call('PEXPIRE', woken_key, WOKEN_TTL_MS)
      code = CODE_MARKED
    end
  end
  reply[#reply + 1] = code
end
if woken > 0 then
  wake(wake_key, woken, wake_cap)
end
return reply
