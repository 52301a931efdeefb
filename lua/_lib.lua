-- _lib.lua: helpers shared by every script. leasequeue/scripts.py prepends
-- this file to each script before loading it, so the helpers are written once.
-- It declares locals only; it touches no key by itself.
--
-- A job record (the value in {P:Q}:jobs) is a JSON object of plain values so
-- that Lua can read and change it on real Redis and on fakeredis alike (no
-- cmsgpack there). The payload stays opaque msgpack in {P:Q}:payloads.
--   state        queued | scheduled | leased | succeeded | skipped | canceled | dead
--   name         job name;   corr, req: correlation and request ids
--   prio, seq    ready-set order: higher prio first, FIFO (seq) within a prio
--   attempt      attempts counted against max_attempts (claims less refunds)
--   token        fencing token, bumped by every claim, never reset
--   work_fail, infra_fail, max_attempts, max_infra
--   enq_ms, ready_ms, due_ms, claim_ms, end_ms   server-clock instants
--   worker       holder of the current or last lease;  cancel: 1 = requested
--   reason, error  why it is dead / the last error

local PRIO_OFFSET = 32767
local SEQ_SPAN = 68719476736 -- 2^36: (prio, seq) packs exactly into a double

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- an integer as an exact decimal string (Lua's tostring keeps 14 digits only)
local function int(n)
  return string.format('%.0f', n)
end

local function ready_score(meta)
  return int((PRIO_OFFSET - meta.prio) * SEQ_SPAN + meta.seq)
end

local NUMERIC_FIELDS = {'prio', 'seq', 'attempt', 'token', 'work_fail', 'infra_fail',
                        'max_attempts', 'max_infra'}

-- returns meta, or nil and 'missing' | 'malformed'
local function load_meta(jobs_key, id)
  local raw = redis.call('HGET', jobs_key, id)
  if not raw then
    return nil, 'missing'
  end
  local ok, meta = pcall(cjson.decode, raw)
  if not ok or type(meta) ~= 'table' or type(meta.state) ~= 'string'
      or type(meta.name) ~= 'string' then
    return nil, 'malformed'
  end
  for _, field in ipairs(NUMERIC_FIELDS) do
    if type(meta[field]) ~= 'number' then
      return nil, 'malformed'
    end
  end
  return meta
end

local function save_meta(jobs_key, id, meta)
  redis.call('HSET', jobs_key, id, cjson.encode(meta))
end

-- append to the capped audit stream; maxlen 0 turns the trail off
local function emit(events_key, maxlen, id, event, detail)
  if maxlen > 0 then
    redis.call('XADD', events_key, 'MAXLEN', '~', maxlen, '*',
               'job', id, 'event', event, 'detail', detail or '')
  end
end

-- the job is in no set when this is called; put it back in line
local function requeue(meta, id, now, delay_ms, ready_key, scheduled_key)
  if delay_ms > 0 then
    meta.state = 'scheduled'
    meta.due_ms = now + delay_ms
    redis.call('ZADD', scheduled_key, int(meta.due_ms), id)
  else
    meta.state = 'queued'
    meta.ready_ms = now
    redis.call('ZADD', ready_key, ready_score(meta), id)
  end
end

-- the job is in no set when this is called; record it as dead
local function bury(meta, id, now, reason, dead_key, letters_key, letters_maxlen, stats_key)
  meta.state = 'dead'
  meta.reason = reason
  meta.end_ms = now
  meta.cancel = 0
  redis.call('ZADD', dead_key, int(now), id)
  redis.call('XADD', letters_key, 'MAXLEN', '~', letters_maxlen, '*',
             'job', id, 'name', meta.name, 'reason', reason, 'error', meta.error or '',
             'attempt', int(meta.attempt), 'work_fail', int(meta.work_fail),
             'infra_fail', int(meta.infra_fail))
  redis.call('HINCRBY', stats_key, 'dead', 1)
end

-- a record that cannot be decoded: keep the raw value untouched as evidence
local function bury_malformed(id, now, dead_key, letters_key, letters_maxlen, stats_key)
  redis.call('ZADD', dead_key, int(now), id)
  redis.call('XADD', letters_key, 'MAXLEN', '~', letters_maxlen, '*',
             'job', id, 'name', '', 'reason', 'malformed', 'error', 'job record cannot be decoded',
             'attempt', '0', 'work_fail', '0', 'infra_fail', '0')
  redis.call('HINCRBY', stats_key, 'dead', 1)
end

local function wake(wake_key, count, cap)
  local room = cap - redis.call('LLEN', wake_key)
  local n = math.min(count, room)
  for _ = 1, n do
    redis.call('RPUSH', wake_key, '1')
  end
end

-- a terminal state that keeps the record for its retention, then expires it
-- k: a table with done, jobs, payloads, results keys
local function finish(meta, id, now, state, retention_ms, k)
  meta.state = state
  meta.end_ms = now
  meta.cancel = 0
  if retention_ms > 0 then
    save_meta(k.jobs, id, meta)
    redis.call('ZADD', k.done, int(now + retention_ms), id)
  else
    redis.call('HDEL', k.jobs, id)
    redis.call('HDEL', k.payloads, id)
    redis.call('HDEL', k.results, id)
  end
end
