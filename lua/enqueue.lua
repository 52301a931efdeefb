-- enqueue.lua: add one job or a batch; a job id that exists already is not
-- duplicated (the existing job's state is returned instead).
-- KEYS[1] jobs         HASH   id -> job record (JSON)
-- KEYS[2] payloads     HASH   id -> payload (msgpack, opaque here)
-- KEYS[3] ready        ZSET   claimable ids
-- KEYS[4] scheduled    ZSET   delayed ids, score = due ms
-- KEYS[5] stats        HASH   counters (seq, enqueued)
-- KEYS[6] wake         LIST   wake-up tokens for idle workers
-- KEYS[7] events       STREAM audit trail
-- ARGV[1] events_maxlen   int   cap of the events stream, 0 = no trail
-- ARGV[2] audit_all       0|1   also record the hot transitions (enqueued)
-- ARGV[3] wake_cap        int   most tokens kept in the wake list
-- ARGV[4..] per job, 7 values: id, name, payload, delay_ms, priority,
--           max_attempts, max_infra
-- Returns: per job two values: created (1 new, 0 existed) and its state
--          ('malformed' when the existing record cannot be decoded).
local jobs_key, payloads_key, ready_key = KEYS[1], KEYS[2], KEYS[3]
local scheduled_key, stats_key, wake_key, events_key = KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local events_maxlen = tonumber(ARGV[1])
local audit_all = ARGV[2] == '1'
local wake_cap = tonumber(ARGV[3])
local FIELDS = 7

local now = now_ms()
local reply = {}
local created = 0
for base = 4, #ARGV, FIELDS do
  local id = ARGV[base]
  local meta, problem = load_meta(jobs_key, id)
  if meta then
    reply[#reply + 1] = 0
    reply[#reply + 1] = meta.state
  elseif problem == 'malformed' then
    reply[#reply + 1] = 0
    reply[#reply + 1] = 'malformed'
  else
    meta = {
      name = ARGV[base + 1], prio = tonumber(ARGV[base + 4]),
      seq = redis.call('HINCRBY', stats_key, 'seq', 1),
      attempt = 0, token = 0, work_fail = 0, infra_fail = 0,
      max_attempts = tonumber(ARGV[base + 5]), max_infra = tonumber(ARGV[base + 6]),
      cancel = 0, enq_ms = now, ready_ms = 0, due_ms = 0, claim_ms = 0, end_ms = 0,
      worker = '', reason = '',
    }
    requeue(meta, id, now, tonumber(ARGV[base + 3]), ready_key, scheduled_key)
    save_meta(jobs_key, id, meta)
    redis.call('HSET', payloads_key, id, ARGV[base + 2])
    if audit_all then
      emit(events_key, events_maxlen, id, 'enqueued', meta.state)
    end
    created = created + 1
    reply[#reply + 1] = 1
    reply[#reply + 1] = meta.state
  end
end
if created > 0 then
  redis.call('HINCRBY', stats_key, 'enqueued', created)
  wake(wake_key, created, wake_cap)
end
return reply
