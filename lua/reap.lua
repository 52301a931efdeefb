-- reap.lua: hand expired leases back (bounded batch). Idempotent: any worker
-- may run it any time.
-- A started run's expiry is an attempt (counted when it started), so a job
-- that kills its worker every time ends dead with reason lease-expired.
-- A run claimed but never started (a lost claim reply, a killed worker's
-- claimed-ahead buffer) is no attempt: it counts as an infrastructure
-- failure and goes back in line at once, dead (lease-expired) only when the
-- infra budget is spent.
-- Budgets: the record's own when set (> 0), else the reaping worker's
-- definition of the job's name, else the defaults.
-- KEYS[1] leases       ZSET   leased ids, score = lease expiry ms
-- KEYS[2] jobs         HASH   id -> job record
-- KEYS[3] payloads     HASH   id -> payload
-- KEYS[4] errors       HASH   id -> error history
-- KEYS[5] results      HASH   id -> result
-- KEYS[6] ready        ZSET   claimable ids
-- KEYS[7] scheduled    ZSET   delayed ids
-- KEYS[8] done         ZSET   finished ids
-- KEYS[9] dead         ZSET   dead ids
-- KEYS[10] deadletters  STREAM dead-letter entries
-- KEYS[11] stats        HASH   counters
-- KEYS[12] wake         LIST   wake-up tokens
-- KEYS[13] events       STREAM audit trail
-- KEYS[14] logs         HASH   id -> captured run logs
-- KEYS[15] waiting      ZSET   ids someone waits for (App.wait)
-- KEYS[16] runstate     HASH   c:/s:/p:<id> -> checkpoints, saga, progress
-- ARGV[1] batch            int   most leases examined
-- ARGV[2] backoff_base_ms  int   a reaped job waits base * 2^(attempt-1) ...
-- ARGV[3] backoff_cap_ms   int   ... capped here (0 = back in line at once)
-- ARGV[4] retention_ms     int   how long a canceled record is kept
-- ARGV[5] events_maxlen    int   cap of the events stream, 0 = no trail
-- ARGV[6] letters_maxlen   int   cap of the dead-letter stream
-- ARGV[7] dead_max         int   most dead jobs kept (trimmed after burials)
-- ARGV[8] dead_retention_ms int   dead jobs older than this are trimmed after burials
-- ARGV[9] default_max_attempts int  work budget of a job with none of its own or named
-- ARGV[10] default_max_infra int   infra budget of a job with none of its own or named
-- ARGV[11..] per job name, 3 values: name, max_attempts, max_infra
-- Returns: {requeued, dead, canceled, stale, unstarted} counts; unstarted: how
--          many of the requeued and dead had never started
-- Sent again: the leases the first run handed back are out of the leases set; the second reaps
-- the next batch of expired leases, if any (as any later call would), counts only those, and
-- answers its own counts, not the first run's.
local leases_key, jobs_key, payloads_key, errors_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local results_key, ready_key, scheduled_key, done_key = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local dead_key, letters_key, stats_key, wake_key, events_key = KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13]
local logs_key, waiting_key = KEYS[14], KEYS[15]
local batch, base_ms, cap_ms = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local retention_ms, events_maxlen, letters_maxlen = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local dead_max, dead_retention_ms = tonumber(ARGV[7]), tonumber(ARGV[8])
local default_attempts, default_infra = tonumber(ARGV[9]), tonumber(ARGV[10])
local NAMED = 3
local named = {}
for base = 11, #ARGV, NAMED do
  named[ARGV[base]] = {tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2])}
end
local k = {done = done_key, jobs = jobs_key, payloads = payloads_key, errors = errors_key,
           results = results_key, logs = logs_key,
           runstate = KEYS[16]}

local now = now_ms()
local requeued, buried, canceled, stale, unstarted = 0, 0, 0, 0, 0
local any_buried = false
local expired = redis.call('ZRANGEBYSCORE', leases_key, '-inf', int(now), 'LIMIT', 0, batch)
for _, id in ipairs(expired) do
  redis.call('ZREM', leases_key, id)
  local meta, problem = load_meta(jobs_key, id)
  if not meta or meta.state ~= 'leased' then
    if problem == 'malformed' then
      bury_malformed(id, now, dead_key, letters_key, letters_maxlen, stats_key)
      any_buried = true
    end
    stale = stale + 1
  else
    local by_name = named[meta.name] or {default_attempts, default_infra}
    local started = meta.started == '1'
    local err = 'lease expired (worker ' .. meta.worker .. ')'
    if not started then
      err = 'lease expired before the run started (worker ' .. meta.worker .. ')'
    end
    push_error(errors_key, id, meta, 'lease-expired', now, err)
    if tonumber(meta.cancel) == 1 then
      finish(meta, id, now, 'canceled', retention_ms, k)
      redis.call('HINCRBY', stats_key, 'canceled', 1)
      signal(waiting_key, {id})
      canceled = canceled + 1
    else
      local spent
      if started then
        spent = tonumber(meta.attempt) >= budget(meta.max_attempts, by_name[1])
      else
        meta.infra_fail = tonumber(meta.infra_fail) + 1
        spent = meta.infra_fail >= budget(meta.max_infra, by_name[2])
        unstarted = unstarted + 1
      end
      if spent then
        bury(meta, id, now, 'lease-expired', err, dead_key, letters_key, letters_maxlen, stats_key)
        save_meta(jobs_key, id, meta)
        emit(events_key, events_maxlen, id, 'dead', 'lease-expired', 'reaper', jobs_key,
             payloads_key)
        signal(waiting_key, {id})
        buried = buried + 1
        any_buried = true
      else
        local delay = 0
        if started then
          delay = math.min(base_ms * 2 ^ math.max(0, tonumber(meta.attempt) - 1), cap_ms)
        end
        requeue(meta, id, now, delay, ready_key, scheduled_key)
        save_meta(jobs_key, id, meta)
        emit(events_key, events_maxlen, id, started and 'reaped' or 'reaped-unstarted',
             meta.worker or '', 'reaper', jobs_key, payloads_key)
        requeued = requeued + 1
      end
    end
  end
end
if requeued > 0 then
  redis.call('HINCRBY', stats_key, 'reaped', requeued)
  wake(wake_key, requeued, requeued)
end
if unstarted > 0 then
  redis.call('HINCRBY', stats_key, 'reaped_unstarted', unstarted)
end
if any_buried then
  trim_dead(k, dead_key, stats_key, now, dead_max, dead_retention_ms)
end
return {requeued, buried, canceled, stale, unstarted}
