-- cancel.lua: cancel a job. Queued or scheduled: canceled at once. Leased:
-- a cancel request that the holder's heartbeat sees. Idempotent.
-- KEYS[1] jobs         HASH   id -> job record
-- KEYS[2] payloads     HASH   id -> payload
-- KEYS[3] errors       HASH   id -> last error
-- KEYS[4] results      HASH   id -> result
-- KEYS[5] ready        ZSET   claimable ids
-- KEYS[6] scheduled    ZSET   delayed ids
-- KEYS[7] done         ZSET   finished ids
-- KEYS[8] stats        HASH   counters
-- KEYS[9] events       STREAM audit trail
-- ARGV[1] id               str
-- ARGV[2] retention_ms     int   how long the canceled record is kept
-- ARGV[3] events_maxlen    int   cap of the events stream, 0 = no trail
-- ARGV[4] token            int   0: cancel whatever the state; > 0: only request
--                                the cancel of that leased run (fenced, for `replace`)
-- Returns: {status, state}; status canceled | cancel-requested | final
--          (already in a terminal state) | stale (token given, run gone) | missing
--          | malformed
local jobs_key, payloads_key, errors_key, results_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local ready_key, scheduled_key, done_key = KEYS[5], KEYS[6], KEYS[7]
local stats_key, events_key = KEYS[8], KEYS[9]
local id, retention_ms, events_maxlen = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local token = tonumber(ARGV[4])
local k = {done = done_key, jobs = jobs_key, payloads = payloads_key, errors = errors_key,
           results = results_key}

local meta, problem = load_meta(jobs_key, id)
if not meta then
  return {problem, problem}
end
if token > 0 and (meta.state ~= 'leased' or tonumber(meta.token) ~= token) then
  return {'stale', meta.state}
end
local now = now_ms()
if meta.state == 'queued' or meta.state == 'scheduled' then
  redis.call('ZREM', ready_key, id)
  redis.call('ZREM', scheduled_key, id)
  finish(meta, id, now, 'canceled', retention_ms, k)
  redis.call('HINCRBY', stats_key, 'canceled', 1)
  emit(events_key, events_maxlen, id, 'canceled', 'by request')
  return {'canceled', 'canceled'}
elseif meta.state == 'leased' then
  if tonumber(meta.cancel) ~= 1 then
    meta.cancel = 1
    save_meta(jobs_key, id, meta)
    emit(events_key, events_maxlen, id, 'cancel-requested', meta.worker or '')
  end
  return {'cancel-requested', 'leased'}
end
return {'final', meta.state}
