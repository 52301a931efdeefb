-- enqueue.lua: add one job or a batch; a job id that exists already is not
-- duplicated (the existing job's state is returned instead).
-- KEYS[1] jobs         HASH   id -> job record
-- KEYS[2] payloads     HASH   id -> payload (msgpack, opaque here), when over INLINE_MAX
--                             bytes; a smaller one is kept inside the record
-- KEYS[3] ready        ZSET   claimable ids of a priority other than 0
-- KEYS[4] scheduled    ZSET   delayed ids, score = due ms
-- KEYS[5] stats        HASH   counters (seq, enqueued)
-- KEYS[6] wake         LIST   wake-up tokens for idle workers
-- KEYS[7] events       STREAM audit trail
-- KEYS[8] line         LIST   queued ids of priority 0, in claim order (_lib.lua, LINE_FLOOR)
-- ARGV[1] events_maxlen   int   cap of the events stream, 0 = no trail
-- ARGV[2] audit_all       0|1   also record the hot transitions (enqueued)
-- ARGV[3] wake_cap        int   most tokens kept in the wake list
-- ARGV[4..] runs of jobs alike, each a head of 8 values: count, name, delay_ms, priority,
--           max_attempts, max_infra, grp (its rate key to park it by, '' = none:
--           see claim.lua), payload (the one payload of every job of the run, sent
--           once; '' when each job brings its own: a payload is never empty), then
--           per job, 2 values: id, payload (count pairs; only the ids, count of
--           them, when the head holds the run's payload)
-- Returns: per job, in order, two values: CODE_CREATED (new) or CODE_EXISTED,
--          and its state ('malformed' when the existing record cannot be decoded);
--          when it created every job of the call, all in one state (the common
--          case, a single enqueue too): that state alone, a string.
-- Why runs: a batch of one kind of job is one run, two values per job; eight
-- per job cost a Lua string and a Redis object each, and the client as much
-- to pack. A run whose jobs all carry the same payload (no payload at all,
-- the common case: the same few bytes) sends it once in its head and one
-- value per job, its id.
-- Sent again: every job the first run created exists, so the second writes nothing but a gap
-- in seq and answers CODE_EXISTED with each job's state now, where the first answered created
-- (the caller is told created=True for an id the client drew, producer.drawn_created, and
-- created=False for a given id; App.rerun sends its call once for that reason). A job that
-- ended and was forgotten (retention 0) between the two runs is created again.
local CODE_EXISTED, CODE_CREATED = 0, 1
local jobs_key, payloads_key, ready_key = KEYS[1], KEYS[2], KEYS[3]
local scheduled_key, stats_key, wake_key, events_key = KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local line_key = KEYS[8]
local audit_all = ARGV[2] == '1'
local wake_cap = ARGV[3]
local RUN_HEAD = 8
-- a batch of at least HKEYS_FROM ids into a jobs hash of at most SMALL_HASH
-- entries reads the hash's ids once (below); fewer ids cost less by HMGET
local HKEYS_FROM, SMALL_HASH = 32, 512

local now_text = ms_text(redis.call('TIME'))

-- One job (what App.enqueue and SyncApp.enqueue send, unless concurrent calls
-- coalesce): the batch's writes without its tables. HSETNX checks the id and
-- writes the record in one call (the batch reads every id first with HMGET);
-- the seq taken before it is a harmless gap when the id exists. Each table,
-- redis.call and tonumber saved here is 1-8k Redis instructions of a
-- one-job call (benchmarks/enqueue_instructions.py).
if #ARGV == 3 + RUN_HEAD + 1 then
  local run = 4  -- its run's head (with its payload), then its id
  local id, payload, delay = ARGV[run + RUN_HEAD], ARGV[run + 7], ARGV[run + 2]
  local seq = redis.call('HINCRBY', stats_key, 'seq', '1')
  local state, ready_ms, due_ms = 'queued', now_text, '0'
  if delay ~= '0' and tonumber(delay) > 0 then
    state, ready_ms, due_ms = 'scheduled', '0', int(tonumber(now_text) + tonumber(delay))
  end
  local head, tail = record_around_seq(state, ARGV[run + 4], ARGV[run + 5], ARGV[run + 3],
                                       now_text, ready_ms, due_ms, ARGV[run + 1], ARGV[run + 6])
  local inline = #payload <= INLINE_MAX
  local record = head .. int(seq) .. tail
  if inline then
    record = record .. PAYLOAD_MARK .. payload
  end
  if redis.call('HSETNX', jobs_key, id, record) == 0 then
    local meta = parse_meta(redis.call('HGET', jobs_key, id))
    return {CODE_EXISTED, meta and meta.state or 'malformed'}
  end
  if not inline then
    redis.call('HSET', payloads_key, id, payload)
  end
  local prio = ARGV[run + 3]
  if state ~= 'queued' then
    redis.call('ZADD', scheduled_key, due_ms, id)
  elseif prio == '0' then
    redis.call('RPUSH', line_key, id)
  else
    redis.call('ZADD', ready_key, int((PRIO_OFFSET - tonumber(prio)) * SEQ_SPAN + seq), id)
  end
  if audit_all then
    emit(events_key, tonumber(ARGV[1]), id, 'enqueued', state, enqueued_by(id), nil, nil,
         envelope_corr(payload, id))
  end
  redis.call('HINCRBY', stats_key, 'enqueued', '1')
  wake(wake_key, 1, wake_cap)
  return state  -- no table for the common reply (scripts.enqueue_replies)
end

local now = tonumber(now_text)
-- every job's id, and where each run starts; a run steps by 1 (ids alone,
-- the run's payload in its head) or by 2 ((id, payload) pairs)
local ids, runs = {}, {}
local at = 4
local nids = 0
while at <= #ARGV do
  local count = tonumber(ARGV[at])
  local step = ARGV[at + 7] == '' and 2 or 1
  runs[#runs + 1] = at
  for i = at + RUN_HEAD, at + RUN_HEAD + step * count - 1, step do
    nids = nids + 1
    ids[nids] = ARGV[i]
  end
  at = at + RUN_HEAD + step * count
end
-- which ids exist already: HMGET, or, for a batch into a small hash, its ids
-- read once. A hash of up to hash-max-listpack-entries (512 by default) is
-- a listpack, where each HMGET lookup scans the whole hash: a fresh queue's
-- second 500-job call looked its ids up in 501 entries, 28k instructions an
-- id (benchmarks/results/script_instructions_small_hash.txt). HKEYS reads at
-- most SMALL_HASH entries (bounded, whatever the server's listpack setting).
local raws
if nids >= HKEYS_FROM and redis.call('HLEN', jobs_key) <= SMALL_HASH then
  local known = {}
  for _, id in ipairs(redis.call('HKEYS', jobs_key)) do
    known[id] = true
  end
  raws = {}
  for j, id in ipairs(ids) do
    if known[id] then
      raws[j] = redis.call('HGET', jobs_key, id)
    end
  end
else
  raws = bulk('HMGET', jobs_key, ids)
end
-- reserve one sequence number per job (unused ones leave harmless gaps)
local seq = redis.call('HINCRBY', stats_key, 'seq', int(nids)) - nids

-- the per-job reply is built only once a job existed: until then every job
-- was created, and its state is fresh[id] (the ids so far are distinct)
local reply, answered = nil, 0
local created = 0
local uniform, mixed = nil, false  -- every run's state, when they all share one
local fresh = {}  -- ids created by this call, so a repeat in the batch is no duplicate
-- the write lists grow by two values per created job, counted here (Lua
-- 5.1's # is a search of the table each time)
local records, payloads, ready, scheduled, line = {}, {}, {}, {}, {}
local w, queued, later, p = 0, 0, 0, 0  -- entries in records, ready, scheduled, payloads
local lined = 0  -- entries in line
local n = 0  -- jobs seen
-- a record's seq as text: the text of seq // 10 (made again only when it
-- changes), then its last digit, in the record's one concatenation: a
-- string.format a job was a tenth of this script's Redis instructions
local DIGIT = {[0] = '0', '1', '2', '3', '4', '5', '6', '7', '8', '9'}
local tens, tens_text = -1, ''
for _, run in ipairs(runs) do
  local count, name, delay_ms = tonumber(ARGV[run]), ARGV[run + 1], tonumber(ARGV[run + 2])
  local shared = ARGV[run + 7]
  local step = shared == '' and 2 or 1
  local prio = ARGV[run + 3]
  local run_state, ready_ms, due_ms, base_score, in_line
  if delay_ms > 0 then
    run_state, ready_ms, due_ms = 'scheduled', '0', int(now + delay_ms)
  else
    run_state, ready_ms, due_ms = 'queued', now_text, '0'
    in_line = prio == '0'
    base_score = (PRIO_OFFSET - tonumber(prio)) * SEQ_SPAN  -- ready_score without the seq
  end
  local head, tail = record_around_seq(run_state, ARGV[run + 4], ARGV[run + 5], prio, now_text,
                                       ready_ms, due_ms, name, ARGV[run + 6])
  -- the run's payload, when it has one, inside the tail once for all its jobs
  local shared_tail = shared ~= '' and #shared <= INLINE_MAX and tail .. PAYLOAD_MARK .. shared
  if uniform == nil then
    uniform = run_state
  elseif uniform ~= run_state then
    mixed = true
  end
  for i = run + RUN_HEAD, run + RUN_HEAD + step * count - 1, step do
    n = n + 1
    seq = seq + 1
    local id = ARGV[i]
    local state = fresh[id]
    if not state and raws[n] then
      local meta = parse_meta(raws[n])
      state = meta and meta.state or 'malformed'
    end
    if state then
      if not reply then  -- the first job that existed: the ones before it were created
        reply = {}
        for j = 1, n - 1 do
          reply[2 * j - 1] = CODE_CREATED
          reply[2 * j] = fresh[ids[j]]
        end
        answered = n - 1
      end
      answered = answered + 1
      reply[2 * answered - 1] = CODE_EXISTED
      reply[2 * answered] = state
    else
      state = run_state
      w = w + 2
      if in_line then
        lined = lined + 1
        line[lined] = id
      elseif base_score then
        queued = queued + 2
        ready[queued - 1] = int(base_score + seq)
        ready[queued] = id
      else
        later = later + 2
        scheduled[later - 1] = due_ms
        scheduled[later] = id
      end
      records[w - 1] = id
      local digit = seq % 10
      if seq - digit ~= tens then
        tens = seq - digit
        tens_text = tens > 0 and int(tens / 10) or ''
      end
      local payload = step == 2 and ARGV[i + 1] or shared
      if shared_tail then  -- the run's payload, inside the record (_lib.lua, split_record)
        records[w] = head .. tens_text .. DIGIT[digit] .. shared_tail
      elseif #payload <= INLINE_MAX then  -- inside the record
        records[w] = head .. tens_text .. DIGIT[digit] .. tail .. PAYLOAD_MARK .. payload
      else
        records[w] = head .. tens_text .. DIGIT[digit] .. tail
        p = p + 2
        payloads[p - 1] = id
        payloads[p] = payload
      end
      if audit_all then
        emit(events_key, tonumber(ARGV[1]), id, 'enqueued', state, enqueued_by(id), nil, nil,
             envelope_corr(payload, id))
      end
      fresh[id] = state
      created = created + 1
      if reply then
        answered = answered + 1
        reply[2 * answered - 1] = CODE_CREATED
        reply[2 * answered] = state
      end
    end
  end
end
bulk('HSET', jobs_key, records)
bulk('HSET', payloads_key, payloads)
bulk('ZADD', ready_key, ready)
bulk('RPUSH', line_key, line)
bulk('ZADD', scheduled_key, scheduled)
if created > 0 then
  redis.call('HINCRBY', stats_key, 'enqueued', int(created))
  wake(wake_key, created, wake_cap)
end
if n > 0 and created == n and not mixed then
  return uniform  -- every job created, in one state: the client needs no pair per job
end
if not reply then  -- every job created, in states of more than one run
  reply = {}
  for j = 1, n do
    reply[2 * j - 1] = CODE_CREATED
    reply[2 * j] = fresh[ids[j]]
  end
end
return reply
