-- enqueue.lua: add one job or a batch; a job id that exists already is not
-- duplicated (the existing job's state is returned instead).
-- KEYS[1] jobs         HASH   id -> job record
-- KEYS[2] payloads     HASH   id -> payload (msgpack, opaque here)
-- KEYS[3] ready        ZSET   claimable ids
-- KEYS[4] scheduled    ZSET   delayed ids, score = due ms
-- KEYS[5] stats        HASH   counters (seq, enqueued)
-- KEYS[6] wake         LIST   wake-up tokens for idle workers
-- KEYS[7] events       STREAM audit trail
-- ARGV[1] events_maxlen   int   cap of the events stream, 0 = no trail
-- ARGV[2] audit_all       0|1   also record the hot transitions (enqueued)
-- ARGV[3] wake_cap        int   most tokens kept in the wake list
-- ARGV[4..] per job, 8 values: id, name, payload, delay_ms, priority,
--           max_attempts, max_infra, grp (its rate key to park it by, '' = none:
--           see claim.lua)
-- Returns: per job two values: CODE_CREATED (new) or CODE_EXISTED, and its
--          state ('malformed' when the existing record cannot be decoded).
local CODE_EXISTED, CODE_CREATED = 0, 1
local jobs_key, payloads_key, ready_key = KEYS[1], KEYS[2], KEYS[3]
local scheduled_key, stats_key, wake_key, events_key = KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local events_maxlen = tonumber(ARGV[1])
local audit_all = ARGV[2] == '1'
local wake_cap = tonumber(ARGV[3])
local FIELDS = 8

local now = now_ms()
local now_text = int(now)
local ids = {}
for base = 4, #ARGV, FIELDS do
  ids[#ids + 1] = ARGV[base]
end
local raws = bulk('HMGET', jobs_key, ids)
-- reserve one sequence number per job (unused ones leave harmless gaps)
local seq = redis.call('HINCRBY', stats_key, 'seq', int(#ids)) - #ids

local reply = {}
local created = 0
local fresh = {}  -- ids created by this call, so a repeat in the batch is no duplicate
local records, payloads, ready, scheduled = {}, {}, {}, {}
for i, id in ipairs(ids) do
  local base = 4 + (i - 1) * FIELDS
  seq = seq + 1
  local state = fresh[id]
  if not state and raws[i] then
    local meta = parse_meta(raws[i])
    state = meta and meta.state or 'malformed'
  end
  if state then
    reply[#reply + 1] = CODE_EXISTED
    reply[#reply + 1] = state
  else
    local delay_ms = tonumber(ARGV[base + 3])
    local prio = ARGV[base + 4]
    local ready_ms, due_ms  -- and state (nil here): the new job's
    if delay_ms > 0 then
      state, ready_ms, due_ms = 'scheduled', '0', int(now + delay_ms)
      scheduled[#scheduled + 1] = due_ms
      scheduled[#scheduled + 1] = id
    else
      state, ready_ms, due_ms = 'queued', now_text, '0'
      ready[#ready + 1] = ready_score({prio = prio, seq = seq})
      ready[#ready + 1] = id
    end
    records[#records + 1] = id
    records[#records + 1] = new_record(state, ARGV[base + 5], ARGV[base + 6], prio, int(seq),
                                       now_text, ready_ms, due_ms, ARGV[base + 1], ARGV[base + 7])
    payloads[#payloads + 1] = id
    payloads[#payloads + 1] = ARGV[base + 2]
    if audit_all then
      emit(events_key, events_maxlen, id, 'enqueued', state, enqueued_by(id), nil,
           envelope_corr(ARGV[base + 2]))
    end
    fresh[id] = state
    created = created + 1
    reply[#reply + 1] = CODE_CREATED
    reply[#reply + 1] = state
  end
end
bulk('HSET', jobs_key, records)
bulk('HSET', payloads_key, payloads)
bulk('ZADD', ready_key, ready)
bulk('ZADD', scheduled_key, scheduled)
if created > 0 then
  redis.call('HINCRBY', stats_key, 'enqueued', int(created))
  wake(wake_key, created, wake_cap)
end
return reply
