-- expire.lua: delete finished jobs whose retention has run out (bounded batch).
-- KEYS[1] done         ZSET   finished ids, score = expiry of the record (ms)
-- KEYS[2] jobs         HASH   id -> job record
-- KEYS[3] payloads     HASH   id -> payload
-- KEYS[4] errors       HASH   id -> last error
-- KEYS[5] results      HASH   id -> result
-- ARGV[1] batch            int   most records deleted
-- Returns: the number of records deleted
local done_key, jobs_key, payloads_key, errors_key, results_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local k = {jobs = jobs_key, payloads = payloads_key, errors = errors_key, results = results_key}
local batch = tonumber(ARGV[1])

local now = now_ms()
local ids = redis.call('ZRANGEBYSCORE', done_key, '-inf', int(now), 'LIMIT', 0, batch)
for _, id in ipairs(ids) do
  redis.call('ZREM', done_key, id)
  local meta = load_meta(jobs_key, id)
  -- a record that is live again (never expected) is left alone
  if not meta or meta.state == 'succeeded' or meta.state == 'skipped' or meta.state == 'canceled' then
    forget(id, k)
  end
end
return #ids
