-- replay.lua: put dead jobs back in the queue with fresh counters. The
-- fencing token is kept (it only ever grows).
-- KEYS[1] jobs         HASH   id -> job record
-- KEYS[2] errors       HASH   id -> error history
-- KEYS[3] ready        ZSET   claimable ids
-- KEYS[4] dead         ZSET   dead ids
-- KEYS[5] stats        HASH   counters
-- KEYS[6] wake         LIST   wake-up tokens
-- KEYS[7] events       STREAM audit trail
-- KEYS[8] payloads     HASH   id -> payload envelope (the audit entry's correlation id)
-- KEYS[9] line         LIST   queued ids of priority 0, in claim order (_lib.lua, LINE_FLOOR)
-- ARGV[1] events_maxlen    int   cap of the events stream, 0 = no trail
-- ARGV[2..] job ids
-- Returns: per id CODE_REPLAYED, CODE_NOT_DEAD (or missing), CODE_MALFORMED record
-- Sent again: a job the first run replayed is queued (or leased) now, not dead, so the second
-- writes nothing for it (no counter twice) and answers CODE_NOT_DEAD where the first answered
-- CODE_REPLAYED; malformed and not-dead ids answer as before.
local CODE_MALFORMED, CODE_NOT_DEAD, CODE_REPLAYED = -1, 0, 1
local jobs_key, errors_key, ready_key, dead_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local stats_key, wake_key, events_key, payloads_key = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local line_key = KEYS[9]
local events_maxlen = tonumber(ARGV[1])

local now = now_ms()
local reply = {}
local replayed = 0
for i = 2, #ARGV do
  local id = ARGV[i]
  local meta, problem = load_meta(jobs_key, id)
  if meta and meta.state == 'dead' then
    redis.call('ZREM', dead_key, id)
    meta.attempt, meta.work_fail, meta.infra_fail, meta.cancel = 0, 0, 0, 0
    meta.reason, meta.end_ms = '', 0
    redis.call('HDEL', errors_key, id)
    requeue_behind(meta, id, now, 0, ready_key, ready_key, line_key, stats_key)
    save_meta(jobs_key, id, meta)
    emit(events_key, events_maxlen, id, 'replayed', '', 'operator:replay', jobs_key, payloads_key)
    replayed = replayed + 1
    reply[#reply + 1] = CODE_REPLAYED
  elseif problem == 'malformed' then
    reply[#reply + 1] = CODE_MALFORMED
  else
    reply[#reply + 1] = CODE_NOT_DEAD
  end
end
if replayed > 0 then
  redis.call('HINCRBY', stats_key, 'dead', -replayed)
  redis.call('HINCRBY', stats_key, 'replayed', replayed)
  wake(wake_key, replayed, replayed)
end
return reply
