-- reap.lua: hand expired leases back (bounded batch). Expiry counts as an
-- attempt (counted at claim), so a job that kills its worker every time ends
-- dead with reason lease-expired. Idempotent: any worker may run it any time.
-- KEYS[1] leases       ZSET   leased ids, score = lease expiry ms
-- KEYS[2] jobs         HASH   id -> job record
-- KEYS[3] payloads     HASH   id -> payload
-- KEYS[4] errors       HASH   id -> last error
-- KEYS[5] results      HASH   id -> result
-- KEYS[6] ready        ZSET   claimable ids
-- KEYS[7] scheduled    ZSET   delayed ids
-- KEYS[8] done         ZSET   finished ids
-- KEYS[9] dead         ZSET   dead ids
-- KEYS[10] deadletters  STREAM dead-letter entries
-- KEYS[11] stats        HASH   counters
-- KEYS[12] wake         LIST   wake-up tokens
-- KEYS[13] events       STREAM audit trail
-- ARGV[1] batch            int   most leases examined
-- ARGV[2] backoff_base_ms  int   a reaped job waits base * 2^(attempt-1) ...
-- ARGV[3] backoff_cap_ms   int   ... capped here (0 = back in line at once)
-- ARGV[4] retention_ms     int   how long a canceled record is kept
-- ARGV[5] events_maxlen    int   cap of the events stream, 0 = no trail
-- ARGV[6] letters_maxlen   int   cap of the dead-letter stream
-- Returns: {requeued, dead, canceled, stale} counts
local leases_key, jobs_key, payloads_key, errors_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local results_key, ready_key, scheduled_key, done_key = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local dead_key, letters_key, stats_key, wake_key, events_key = KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13]
local batch, base_ms, cap_ms = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local retention_ms, events_maxlen, letters_maxlen = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local k = {done = done_key, jobs = jobs_key, payloads = payloads_key, errors = errors_key,
           results = results_key}

local now = now_ms()
local requeued, buried, canceled, stale = 0, 0, 0, 0
local expired = redis.call('ZRANGEBYSCORE', leases_key, '-inf', int(now), 'LIMIT', 0, batch)
for _, id in ipairs(expired) do
  redis.call('ZREM', leases_key, id)
  local meta, problem = load_meta(jobs_key, id)
  if not meta or meta.state ~= 'leased' then
    if problem == 'malformed' then
      bury_malformed(id, now, dead_key, letters_key, letters_maxlen, stats_key)
    end
    stale = stale + 1
  else
    local err = 'lease expired (worker ' .. meta.worker .. ')'
    redis.call('HSET', errors_key, id, err)
    if tonumber(meta.cancel) == 1 then
      finish(meta, id, now, 'canceled', retention_ms, k)
      redis.call('HINCRBY', stats_key, 'canceled', 1)
      canceled = canceled + 1
    elseif tonumber(meta.attempt) >= tonumber(meta.max_attempts) then
      bury(meta, id, now, 'lease-expired', err, dead_key, letters_key, letters_maxlen, stats_key)
      save_meta(jobs_key, id, meta)
      emit(events_key, events_maxlen, id, 'dead', 'lease-expired')
      buried = buried + 1
    else
      local delay = math.min(base_ms * 2 ^ math.max(0, tonumber(meta.attempt) - 1), cap_ms)
      requeue(meta, id, now, delay, ready_key, scheduled_key)
      save_meta(jobs_key, id, meta)
      emit(events_key, events_maxlen, id, 'reaped', meta.worker or '')
      requeued = requeued + 1
    end
  end
end
if requeued > 0 then
  redis.call('HINCRBY', stats_key, 'reaped', requeued)
  wake(wake_key, requeued, requeued)
end
return {requeued, buried, canceled, stale}
