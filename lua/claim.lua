-- claim.lua: promote due scheduled jobs (bounded), then lease up to `count`
-- ready jobs in priority/FIFO order: count the attempt, give the run a new
-- fencing token, set the lease expiry from the server clock. Tokens come from
-- one counter per queue, so they never repeat, even for a job id reused after
-- its record was deleted.
-- KEYS[1] ready        ZSET   claimable ids
-- KEYS[2] scheduled    ZSET   delayed ids, score = due ms
-- KEYS[3] leases       ZSET   leased ids, score = lease expiry ms
-- KEYS[4] jobs         HASH   id -> job record
-- KEYS[5] payloads     HASH   id -> payload
-- KEYS[6] dead         ZSET   dead ids, score = dead ms
-- KEYS[7] deadletters  STREAM dead-letter entries
-- KEYS[8] stats        HASH   counters
-- KEYS[9] events       STREAM audit trail
-- ARGV[1] count            int   most jobs to lease
-- ARGV[2] lease_ms         int   lease duration
-- ARGV[3] worker_id        str   holder, recorded on the job
-- ARGV[4] promote_batch    int   most scheduled jobs promoted in this call
-- ARGV[5] events_maxlen    int   cap of the events stream, 0 = no trail
-- ARGV[6] audit_all        0|1   also record the hot transitions (claimed)
-- ARGV[7] letters_maxlen   int   cap of the dead-letter stream
-- Returns: {now_ms, next_due_in_ms (-1: nothing scheduled), n, then per job 10
--          values: id, token, attempt, name, payload, max_attempts, max_infra,
--          work_fail, infra_fail, enq_ms}
local ready_key, scheduled_key, leases_key, jobs_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local payloads_key, dead_key, letters_key = KEYS[5], KEYS[6], KEYS[7]
local stats_key, events_key = KEYS[8], KEYS[9]
local count = tonumber(ARGV[1])
local lease_ms = tonumber(ARGV[2])
local worker_id = ARGV[3]
local promote_batch = tonumber(ARGV[4])
local events_maxlen = tonumber(ARGV[5])
local audit_all = ARGV[6] == '1'
local letters_maxlen = tonumber(ARGV[7])

local now = now_ms()
local now_text = int(now)
local lease_until = int(now + lease_ms)

-- 1. promote due scheduled jobs; a retry enters the line behind what is queued
local due = redis.call('ZRANGEBYSCORE', scheduled_key, '-inf', now_text, 'LIMIT', 0, promote_batch)
for _, id in ipairs(due) do
  redis.call('ZREM', scheduled_key, id)
  local meta, problem = load_meta(jobs_key, id)
  if meta and meta.state == 'scheduled' then
    meta.seq = redis.call('HINCRBY', stats_key, 'seq', 1)
    requeue(meta, id, now, 0, ready_key, scheduled_key)
    save_meta(jobs_key, id, meta)
  elseif problem == 'malformed' then
    bury_malformed(id, now, dead_key, letters_key, letters_maxlen, stats_key)
  end
end

-- 2. lease, reading and writing the batch with one call per key
local jobs = {}
local n = 0
if count > 0 then
  local popped = redis.call('ZPOPMIN', ready_key, count)
  local ids = {}
  for i = 1, #popped, 2 do
    ids[#ids + 1] = popped[i]
  end
  local raws = bulk('HMGET', jobs_key, ids)
  local payloads = bulk('HMGET', payloads_key, ids)
  -- reserve one token per popped id (unused ones leave harmless gaps)
  local token = #ids > 0 and redis.call('HINCRBY', stats_key, 'token', #ids) - #ids or 0
  local records, leases = {}, {}
  for i, id in ipairs(ids) do
    local meta = raws[i] and parse_meta(raws[i])
    if meta and meta.state == 'queued' then
      meta.state = 'leased'
      meta.attempt = tonumber(meta.attempt) + 1
      token = token + 1
      meta.token = token
      meta.worker = worker_id
      meta.claim_ms = now_text
      records[#records + 1] = id
      records[#records + 1] = encode_meta(meta)
      leases[#leases + 1] = lease_until
      leases[#leases + 1] = id
      if audit_all then
        emit(events_key, events_maxlen, id, 'claimed', worker_id)
      end
      n = n + 1
      local j = #jobs
      jobs[j + 1] = id
      jobs[j + 2] = meta.token
      jobs[j + 3] = meta.attempt
      jobs[j + 4] = meta.name
      jobs[j + 5] = payloads[i] or ''
      jobs[j + 6] = meta.max_attempts
      jobs[j + 7] = meta.max_infra
      jobs[j + 8] = meta.work_fail
      jobs[j + 9] = meta.infra_fail
      jobs[j + 10] = meta.enq_ms
    elseif raws[i] then
      if meta then
        -- a record in another state: a stale entry in the ready set
        redis.call('HINCRBY', stats_key, 'garbage', 1)
      else
        bury_malformed(id, now, dead_key, letters_key, letters_maxlen, stats_key)
      end
    else
      -- an id with no record: garbage in the ready set
      redis.call('HINCRBY', stats_key, 'garbage', 1)
    end
  end
  bulk('HSET', jobs_key, records)
  bulk('ZADD', leases_key, leases)
end

local next_due = -1
local first = redis.call('ZRANGE', scheduled_key, 0, 0, 'WITHSCORES')
if #first > 0 then
  next_due = math.max(0, tonumber(first[2]) - now)
end

local reply = {int(now), int(next_due), n}
for i = 1, #jobs do
  reply[3 + i] = jobs[i]
end
return reply
