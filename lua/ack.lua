-- ack.lua: finish leased jobs without failure (succeeded, skipped, or
-- canceled after a cancel request), fenced by token; a batch in one call.
-- KEYS[1] leases       ZSET   leased ids
-- KEYS[2] jobs         HASH   id -> job record
-- KEYS[3] payloads     HASH   id -> payload
-- KEYS[4] errors       HASH   id -> last error
-- KEYS[5] results      HASH   id -> result (msgpack)
-- KEYS[6] done         ZSET   finished ids, score = expiry of the record (ms)
-- KEYS[7] stats        HASH   counters
-- KEYS[8] events       STREAM audit trail
-- ARGV[1] events_maxlen    int   cap of the events stream, 0 = no trail
-- ARGV[2] audit_all        0|1   also record the hot transitions (succeeded)
-- ARGV[3..] per job, 5 values: id, token, outcome (succeeded | skipped |
--           canceled), result (bytes, '' = none), retention_ms
-- Returns: per job 1 finished, 0 refused (stale token or not leased)
local leases_key, jobs_key, payloads_key, errors_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local results_key, done_key, stats_key, events_key = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local events_maxlen = tonumber(ARGV[1])
local audit_all = ARGV[2] == '1'
local k = {done = done_key, jobs = jobs_key, payloads = payloads_key, errors = errors_key,
           results = results_key}

local now = now_ms()
local reply = {}
local counts = {}
for base = 3, #ARGV, 5 do
  local id, token, outcome = ARGV[base], tonumber(ARGV[base + 1]), ARGV[base + 2]
  local result, retention_ms = ARGV[base + 3], tonumber(ARGV[base + 4])
  local meta = load_meta(jobs_key, id)
  if meta and meta.state == 'leased' and meta.token == token then
    redis.call('ZREM', leases_key, id)
    if result ~= '' and retention_ms > 0 then
      redis.call('HSET', results_key, id, result)
    end
    finish(meta, id, now, outcome, retention_ms, k)
    if audit_all or outcome ~= 'succeeded' then
      emit(events_key, events_maxlen, id, outcome, '')
    end
    counts[outcome] = (counts[outcome] or 0) + 1
    reply[#reply + 1] = 1
  else
    reply[#reply + 1] = 0
  end
end
for outcome, n in pairs(counts) do
  redis.call('HINCRBY', stats_key, outcome, n)
end
return reply
