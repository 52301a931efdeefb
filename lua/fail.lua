-- fail.lua: a leased job failed. Retry it after the delay Python computed,
-- or bury it in the dead letters when its budget is spent; fenced by token.
-- Work failures count against max_attempts; infrastructure failures count
-- against max_infra and refund the attempt of a started run, so the two
-- budgets stay apart. A work or dead failure of a run never marked started
-- counts its attempt first (it ran). A job whose cancel was requested is not
-- retried: it ends canceled. The error joins the job's error history.
-- KEYS[1] leases       ZSET   leased ids
-- KEYS[2] jobs         HASH   id -> job record
-- KEYS[3] payloads     HASH   id -> payload
-- KEYS[4] errors       HASH   id -> error history
-- KEYS[5] results      HASH   id -> result
-- KEYS[6] ready        ZSET   claimable ids
-- KEYS[7] scheduled    ZSET   delayed ids
-- KEYS[8] done         ZSET   finished ids, score = expiry of the record
-- KEYS[9] dead         ZSET   dead ids
-- KEYS[10] deadletters  STREAM dead-letter entries
-- KEYS[11] stats        HASH   counters
-- KEYS[12] wake         LIST   wake-up tokens
-- KEYS[13] events       STREAM audit trail
-- KEYS[14] logs         HASH   id -> captured run logs
-- KEYS[15] waiting      ZSET   ids someone waits for (App.wait)
-- KEYS[16] runstate     HASH   c:/s:/p:<id> -> checkpoints, saga, progress
-- KEYS[17] line         LIST   queued ids of priority 0, in claim order (_lib.lua, LINE_FLOOR)
-- ARGV[1] id               str
-- ARGV[2] token            int
-- ARGV[3] kind             str   work | infra | dead
-- ARGV[4] reason           str   dead reason when kind = dead (permanent, unknown-job ...)
-- ARGV[5] error            str   the error, pushed on the job's error history
-- ARGV[6] delay_ms         int   retry delay
-- ARGV[7] events_maxlen    int   cap of the events stream, 0 = no trail
-- ARGV[8] letters_maxlen   int   cap of the dead-letter stream
-- ARGV[9] retention_ms     int   how long a canceled record is kept
-- ARGV[10] max_attempts     int   the worker's effective work budget for this job (> 0)
-- ARGV[11] max_infra        int   the worker's effective infra budget for this job (> 0)
-- ARGV[12] dead_max         int   most dead jobs kept (trimmed after a burial)
-- ARGV[13] dead_retention_ms int  dead jobs older than this are trimmed after a burial
-- ARGV[14] logs             str   this run's captured log lines ('' = none)
-- Returns: {code, state, attempt, work_fail, infra_fail}; code CODE_REFUSED
--          (stale token or not leased), CODE_RETRY, CODE_DEAD, CODE_CANCELED
-- Sent again: the first run took the job out of leased (retried, dead or canceled), so the
-- second writes nothing (no error, attempt or counter twice); finding the job under this token
-- where a failure leaves it (queued or scheduled, dead, canceled) with this error last in its
-- history, it answers as the first did (CODE_RETRY, CODE_DEAD, CODE_CANCELED and the record
-- now). A record not kept (canceled, retention 0; a dead one trimmed) answers CODE_REFUSED.
local CODE_REFUSED, CODE_RETRY, CODE_DEAD, CODE_CANCELED = 0, 1, 2, 3
local leases_key, jobs_key, payloads_key, errors_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local results_key, ready_key, scheduled_key, done_key = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local dead_key, letters_key, stats_key, wake_key, events_key = KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13]
local logs_key, waiting_key, line_key = KEYS[14], KEYS[15], KEYS[17]
local id, token, kind, reason = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local err, delay_ms = ARGV[5], tonumber(ARGV[6])
local events_maxlen, letters_maxlen = tonumber(ARGV[7]), tonumber(ARGV[8])
local retention_ms = tonumber(ARGV[9])
local max_attempts, max_infra = tonumber(ARGV[10]), tonumber(ARGV[11])
local dead_max, dead_retention_ms = tonumber(ARGV[12]), tonumber(ARGV[13])
local logs = ARGV[14]
local k = {done = done_key, jobs = jobs_key, payloads = payloads_key, errors = errors_key,
           results = results_key, logs = logs_key,
           runstate = KEYS[16]}

local AGAIN = {queued = CODE_RETRY, scheduled = CODE_RETRY, dead = CODE_DEAD,
               canceled = CODE_CANCELED}  -- where a failure leaves its job

local now = now_ms()
local meta = load_meta(jobs_key, id)
if not meta or meta.state ~= 'leased' or tonumber(meta.token) ~= token then
  -- this run's failure sent again (its reply lost): the job where it left it, this
  -- token's, this error last (a reaped lease's is 'lease-expired', a late call refused)
  local again = meta and tonumber(meta.token) == token and AGAIN[meta.state]
  if again and last_error_is(errors_key, id, kind, err) then
    return {again, meta.state, meta.attempt, meta.work_fail, meta.infra_fail}
  end
  return {CODE_REFUSED, meta and meta.state or 'missing', 0, 0, 0}
end
redis.call('ZREM', leases_key, id)
local started = meta.started == '1'
if not started and kind ~= 'infra' then
  meta.attempt = tonumber(meta.attempt) + 1  -- the run happened: it counts
end
push_error(errors_key, id, meta, kind, now, err)
if logs ~= '' then
  push_log(logs_key, id, meta, kind, now, logs)
end

local dead_reason = nil
if kind == 'work' then
  meta.work_fail = tonumber(meta.work_fail) + 1
  if tonumber(meta.attempt) >= max_attempts then
    dead_reason = 'max-attempts'
  end
elseif kind == 'infra' then
  meta.infra_fail = tonumber(meta.infra_fail) + 1
  if started then
    meta.attempt = math.max(0, tonumber(meta.attempt) - 1)
  end
  if meta.infra_fail >= max_infra then
    dead_reason = 'max-infra-attempts'
  end
else
  dead_reason = reason
end
meta.started = 0
local code
if tonumber(meta.cancel) == 1 and not dead_reason then
  emit(events_key, events_maxlen, id, 'canceled', 'after failure', 'worker:' .. meta.worker,
       jobs_key, payloads_key)
  finish(meta, id, now, 'canceled', retention_ms, k)
  redis.call('HINCRBY', stats_key, 'canceled', 1)
  signal(waiting_key, {id})
  return {CODE_CANCELED, 'canceled', meta.attempt, meta.work_fail, meta.infra_fail}
elseif dead_reason then
  bury(meta, id, now, dead_reason, err, dead_key, letters_key, letters_maxlen, stats_key)
  emit(events_key, events_maxlen, id, 'dead', dead_reason, 'worker:' .. meta.worker,
       jobs_key, payloads_key)
  code = CODE_DEAD
else
  requeue_behind(meta, id, now, delay_ms, ready_key, scheduled_key, line_key, stats_key)
  redis.call('HINCRBY', stats_key, 'retried', 1)
  emit(events_key, events_maxlen, id, 'retried', kind, 'worker:' .. meta.worker, jobs_key,
       payloads_key)
  wake(wake_key, 1, 1)
  code = CODE_RETRY
end
save_meta(jobs_key, id, meta)
if code == CODE_DEAD then
  signal(waiting_key, {id})
  trim_dead(k, dead_key, stats_key, now, dead_max, dead_retention_ms)
end
return {code, meta.state, meta.attempt, meta.work_fail, meta.infra_fail}
