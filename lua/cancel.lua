-- cancel.lua: cancel a job. Queued, scheduled, or leased and not started yet:
-- canceled at once (the holder's later start, ack, fail, renew and release
-- are refused: it is no longer leased). Leased and started: a cancel request
-- that the holder's heartbeat sees. Idempotent.
-- KEYS[1] jobs         HASH   id -> job record
-- KEYS[2] payloads     HASH   id -> payload
-- KEYS[3] errors       HASH   id -> error history
-- KEYS[4] results      HASH   id -> result
-- KEYS[5] ready        ZSET   claimable ids
-- KEYS[6] scheduled    ZSET   delayed ids
-- KEYS[7] done         ZSET   finished ids
-- KEYS[8] stats        HASH   counters
-- KEYS[9] events       STREAM audit trail
-- KEYS[10] leases       ZSET   leased ids
-- KEYS[11] logs         HASH   id -> captured run logs
-- KEYS[12] waiting      ZSET   ids someone waits for (App.wait)
-- KEYS[13] runstate     HASH   c:/s:/p:<id> -> checkpoints, saga, progress
-- ARGV[1] id               str
-- ARGV[2] retention_ms     int   how long the canceled record is kept
-- ARGV[3] events_maxlen    int   cap of the events stream, 0 = no trail
-- ARGV[4] token            int   0: cancel whatever the state; > 0: only request
--                                the cancel of that leased run (fenced, for `replace`)
-- Returns: {status, state}; status CODE_CANCELED | CODE_CANCEL_REQUESTED |
--          CODE_FINAL (already in a terminal state) | CODE_STALE (token given,
--          run gone) | CODE_MISSING | CODE_MALFORMED
-- Sent again: a job the first run canceled has ended, so the second writes nothing (no count
-- or event twice) and answers CODE_FINAL 'canceled' where the first answered CODE_CANCELED, or
-- CODE_MISSING when the record is not kept (retention 0). A cancel request answers
-- CODE_CANCEL_REQUESTED again with no second write; stale, final and missing answer as before.
local CODE_CANCELED, CODE_CANCEL_REQUESTED, CODE_FINAL = 'canceled', 'cancel-requested', 'final'
local CODE_STALE, CODE_MISSING, CODE_MALFORMED = 'stale', 'missing', 'malformed'
local jobs_key, payloads_key, errors_key, results_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local ready_key, scheduled_key, done_key = KEYS[5], KEYS[6], KEYS[7]
local stats_key, events_key, leases_key = KEYS[8], KEYS[9], KEYS[10]
local logs_key, waiting_key = KEYS[11], KEYS[12]
local id, retention_ms, events_maxlen = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local token = tonumber(ARGV[4])
local k = {done = done_key, jobs = jobs_key, payloads = payloads_key, errors = errors_key,
           results = results_key, logs = logs_key,
           runstate = KEYS[13]}

local meta, problem = load_meta(jobs_key, id)
if not meta then
  if problem == 'malformed' then
    return {CODE_MALFORMED, problem}
  end
  return {CODE_MISSING, problem}
end
if token > 0 and (meta.state ~= 'leased' or tonumber(meta.token) ~= token) then
  return {CODE_STALE, meta.state}
end
local now = now_ms()
local leased = meta.state == 'leased'
if meta.state == 'queued' or meta.state == 'scheduled'
    or (leased and token == 0 and meta.started ~= '1') then
  if redis.call('ZREM', ready_key, id) == 0 and meta.state == 'queued'
      and tonumber(meta.prio) == 0 then
    -- in the line: its entry stays (an LREM is O(line)), counted stale until
    -- a claim pops it (_lib.lua, LINE_FLOOR)
    redis.call('HINCRBY', stats_key, 'line_stale', 1)
  end
  redis.call('ZREM', scheduled_key, id)
  redis.call('ZREM', leases_key, id)
  emit(events_key, events_maxlen, id, 'canceled',
       leased and 'by request, not started' or 'by request', 'operator:cancel', jobs_key,
       payloads_key)
  finish(meta, id, now, 'canceled', retention_ms, k)
  redis.call('HINCRBY', stats_key, 'canceled', 1)
  signal(waiting_key, {id})
  return {CODE_CANCELED, 'canceled'}
elseif leased then
  if tonumber(meta.cancel) ~= 1 then
    meta.cancel = 1
    save_meta(jobs_key, id, meta)
    emit(events_key, events_maxlen, id, 'cancel-requested', meta.worker or '',
         'operator:cancel', jobs_key, payloads_key)
  end
  return {CODE_CANCEL_REQUESTED, 'leased'}
end
return {CODE_FINAL, meta.state}
