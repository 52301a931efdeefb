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
-- ARGV[3] outcome          str   succeeded | skipped | canceled, for the whole batch
-- ARGV[4] retention_ms     int   how long the records are kept (0 = delete now)
-- ARGV[5..] per job, 3 values: id, token, result (bytes, '' = none)
-- Returns: per job 1 finished, 0 refused (stale token or not leased)
local leases_key, jobs_key, payloads_key, errors_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local results_key, done_key, stats_key, events_key = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local events_maxlen = tonumber(ARGV[1])
local audit_all = ARGV[2] == '1'
local outcome, retention_ms = ARGV[3], tonumber(ARGV[4])
local FIELDS = 3
local k = {done = done_key, jobs = jobs_key, payloads = payloads_key, errors = errors_key,
           results = results_key}

local now = now_ms()
local now_text = int(now)
local ids, tokens, given = {}, {}, {}
for base = 5, #ARGV, FIELDS do
  ids[#ids + 1] = ARGV[base]
  tokens[#tokens + 1] = tonumber(ARGV[base + 1])
  given[#given + 1] = ARGV[base + 2]
end
local raws = bulk('HMGET', jobs_key, ids)

local reply = {}
local finished = 0
local leases, records, done, results = {}, {}, {}, {}
local done_until = int(now + retention_ms)
local finished_now = {}  -- an id named twice in one batch finishes once
for i, id in ipairs(ids) do
  local result = given[i]
  local meta = raws[i] and not finished_now[id] and parse_meta(raws[i])
  if meta and meta.state == 'leased' and tonumber(meta.token) == tokens[i] then
    finished_now[id] = true
    leases[#leases + 1] = id
    if retention_ms > 0 then
      meta.state = outcome
      meta.end_ms = now_text
      meta.cancel = '0'
      records[#records + 1] = id
      records[#records + 1] = encode_meta(meta)
      done[#done + 1] = done_until
      done[#done + 1] = id
      if result ~= '' then
        results[#results + 1] = id
        results[#results + 1] = result
      end
    else
      finish(meta, id, now, outcome, 0, k)
    end
    if audit_all or outcome ~= 'succeeded' then
      emit(events_key, events_maxlen, id, outcome, '')
    end
    finished = finished + 1
    reply[#reply + 1] = 1
  else
    reply[#reply + 1] = 0
  end
end
bulk('ZREM', leases_key, leases)
bulk('HSET', jobs_key, records)
bulk('ZADD', done_key, done)
bulk('HSET', results_key, results)
if finished > 0 then
  redis.call('HINCRBY', stats_key, outcome, finished)
end
return reply
