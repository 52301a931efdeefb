-- _lib.lua: helpers shared by every script. leasequeue/scripts.py prepends
-- this file to each script before loading it, so the helpers are written once.
-- It declares locals only; it touches no key by itself.
--
-- A job lives in four per-queue hashes, split by who reads what:
--   {P:Q}:jobs      id -> the record Lua reads and changes: plain values joined
--                   by '|' (parsed with one string.match; a JSON record cost
--                   7 us of decode+encode per job per script, this one under 1),
--                   then, for a payload of at most INLINE_MAX bytes,
--                   PAYLOAD_MARK ('|' and a NUL) and the payload (split_record)
--   {P:Q}:payloads  id -> msgpack envelope [1, corr, req, kwargs], opaque here:
--                   a payload over INLINE_MAX bytes, and every payload of a job
--                   enqueued before payloads moved into the record
--   {P:Q}:errors    id -> the last ERRORS_KEPT errors (push_error), entries joined by
--                   "\30", each `attempt \31 kind \31 at_ms \31 text`
--   {P:Q}:results   id -> msgpack result (written on success only)
--   {P:Q}:logs      id -> the captured ctx.log lines of the last LOG_RUNS_KEPT runs
--                   (push_log), entries joined by "\30", each
--                   `attempt \31 outcome \31 at_ms \31 lines` (lines joined by "\n")
-- Record fields, in order (RECORD_FIELDS; the record starts with version "2" or "3";
-- version "1" records, without `started`, are still read; version "4", a job as
-- enqueued, holds only some of them: RECORD_PATTERN_V4):
--   state        queued | scheduled | leased | succeeded | skipped | canceled | dead
--   token        fencing token, bumped by every claim, never reset
--   attempt      runs counted against max_attempts (started runs less refunds)
--   work_fail, infra_fail, max_attempts, max_infra  (a budget 0 = unset: the
--                worker's definition of the job decides)
--   cancel       1 = cancel requested
--   started      1 = the current lease's run has started (its attempt is counted);
--                0 = not leased, or leased and not started yet
--   prio, seq    claim order: higher prio first, FIFO (seq) within a prio
--                (the place in line: LINE_FLOOR below)
--   enq_ms, ready_ms, due_ms, claim_ms, end_ms   server-clock instants (0 = never)
--   name         job name;  worker: holder of the current or last lease;
--   reason       why it is dead ('' otherwise)
--   grp          version "3" only: the job's park group, its rate key (claim.lua
--                parks the job once by it); a record without one stays version "2"
--   name, worker, reason and grp never hold '|' (Python validates them).

local PRIO_OFFSET = 32767
local SEQ_SPAN = 68719476736 -- 2^36: (prio, seq) packs exactly into a double

-- The place in line. A queued job of priority 0 (the default) waits in the
-- queue's line, a LIST: RPUSH at the back, LPOP at the front. A list element
-- is the id alone, some 95 bytes a job less than a sorted-set entry, and a
-- cheaper write (benchmarks/layout_memory.py). Every other queued job waits
-- in the ready set, a ZSET scored by ready_score: a job of another priority,
-- and a job of priority 0 put back at its place (reaped or released with its
-- sequence number kept: requeue), whose number is below every one in the line
-- (the line is in sequence order: each push takes a new number). A claim
-- takes, in order, the ready set's entries below LINE_FLOOR (priority above
-- 0, then priority 0 put back), the line, the ready set's rest (priority
-- below 0): the order of one sorted set (claim.lua, pop_ready).
-- A job canceled while in the line leaves its entry there (an LREM is
-- O(line)); the stats hash's `line_stale` counts such entries, and the claim
-- that pops one takes it off (stats.lua subtracts them from the line's length).
-- Its id, enqueued again once its record is gone, reads as live through both
-- entries: a claim takes an id once a call, and a line entry of a job whose
-- home is the ready set is stale (claim.lua pop_queued, claim_line.lua).
local LINE_FLOOR = (PRIO_OFFSET + 1) * SEQ_SPAN  -- the score of priority -1, seq 0

-- A payload of at most INLINE_MAX bytes is kept inside its job's record, after
-- PAYLOAD_MARK ('|' and a NUL): one hash entry and one copy of the id less per
-- job than an entry of its own in the payloads hash (benchmarks/footprint.py).
-- No record field holds a NUL (names, workers and groups are validated in
-- Python, reasons cleaned: record.py record_text), so the first mark ends the
-- fields. Its '|' makes the record a field longer than any pattern of the code
-- before reads, so that code finds the record malformed (and buries it
-- untouched) instead of taking the NUL and the payload for its last field.
-- Every rewrite of the record copies the payload with it, hence the bound: a
-- larger payload stays in the payloads hash, as did every payload written
-- before (both are read).
local INLINE_MAX = 1024
local PAYLOAD_MARK = '|\0'

-- a record's fields and its inline payload (nil: none, it is in the payloads
-- hash). The first NUL is the mark's (found with one memchr: a find of the
-- two-byte mark stops at every '|'); one without the '|' before it is no mark,
-- and the fields' patterns then find the record malformed.
local function split_record(raw)
  local nul = string.find(raw, '\0', 1, true)
  if nul and string.byte(raw, nul - 1) == 124 then  -- '|'
    return string.sub(raw, 1, nul - 2), string.sub(raw, nul + 1)
  end
  return raw, nil
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- TIME's reply {seconds, microseconds} as now_ms's instant in text, with no
-- number in between: the seconds, then the millisecond digits of the six-digit
-- microseconds. For enqueue.lua, which stores the instant and needs it as a
-- number only for a delay: two tonumber (strtod) and a string.format saved
-- are some 4k Redis instructions of a one-job call.
local function ms_text(t)
  return t[1] .. string.sub('00000' .. t[2], -6, -4)
end

-- an integer as an exact decimal string (Lua's tostring keeps 14 digits only).
-- A whole number within 2^53 (every id, score, instant and count a script
-- makes) is printed as an integer ('%d': a few dozen instructions); anything
-- else goes through '%.0f' (glibc's float printer, thousands of instructions
-- per call: the largest single cost of a claim or an ack before this).
-- Numbers given to redis.call are formatted by Redis with '%.17g', as costly:
-- the hot paths pass text (ARGV as received, int() or literals) instead.
local INT_EXACT = 9007199254740992 -- 2^53
local function int(n)
  if n % 1 == 0 and n < INT_EXACT and n > -INT_EXACT then
    return string.format('%d', n)
  end
  return string.format('%.0f', n)
end

-- a record field as stored (numbers the script computed become exact text)
local function str(v)
  if type(v) == 'number' then
    return int(v)
  end
  return v
end

local function ready_score(meta)
  return int((PRIO_OFFSET - tonumber(meta.prio)) * SEQ_SPAN + tonumber(meta.seq))
end

-- Each pattern is one literal, lines too long and all: constants joined with
-- '..' are joined again on every call (Lua 5.1 folds no strings), which cost
-- these three 5.5k Redis instructions per call of every script that parses a
-- record, 3% of a one-job enqueue (benchmarks/enqueue_instructions.py)
local RECORD_PATTERN = '^2|(%l+)|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|(%d)|([01])|(%-?%d+)|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|([^|]*)|([^|]*)|([^|]*)$' -- luacheck: ignore 631
-- version 3: version 2 and the job's park group (written only for a job that
-- has one: see claim.lua; every other record stays version 2)
local RECORD_PATTERN_V3 = '^3|(%l+)|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|(%d)|([01])|(%-?%d+)|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|([^|]*)|([^|]*)|([^|]*)|([^|]+)$' -- luacheck: ignore 631
-- claim.lua's lease of a queued record of version 2 or 3 (the caller checks
-- what follows the worker: the reason, and version 3's park group). Captures:
-- version, token, attempt, work_fail, infra_fail, max_attempts, max_infra,
-- cancel, `prio|seq`, enq_ms, `ready_ms|due_ms`, end_ms, name, and the rest
-- after the worker; `started` and `claim_ms` are set by the lease, not read
local LEASE_PATTERN = '^([23])|queued|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|(%d)|[01]|(%-?%d+|%d+)|(%d+)|(%d+|%d+)|%d+|(%d+)|([^|]*)|[^|]*|(.*)$' -- luacheck: ignore 631
-- ack.lua's finish of a leased record of version 2 or 3 (the caller checks
-- what follows the worker, as for LEASE_PATTERN). Captures: version, token,
-- attempt, `work_fail|infra_fail|max_attempts|max_infra`, started,
-- `prio|seq|enq_ms|ready_ms|due_ms|claim_ms`, name, worker, and the rest after
-- the worker; `cancel` and `end_ms` are set by the finish, not read
local FINISH_PATTERN = '^([23])|leased|(%d+)|(%d+)|(%d+|%d+|%d+|%d+)|%d|([01])|(%-?%d+|%d+|%d+|%d+|%d+|%d+)|%d+|([^|]*)|([^|]*)|(.*)$' -- luacheck: ignore 631
local RECORD_PATTERN_V1 = '^1|(%l+)|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|(%d)|(%-?%d+)|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|([^|]*)|([^|]*)|([^|]*)$' -- luacheck: ignore 631
-- version 4: a job as enqueued, queued and never claimed since (enqueue.lua
-- writes it for a queued job; every rewrite writes version 2 or 3). Only
-- what such a job does not have in common with every other: prio, seq,
-- enq_ms, max_attempts, max_infra, name, grp ('' = none). The rest is
-- implied: state queued, token, attempt, failures, cancel and started 0,
-- ready_ms = enq_ms, due_ms, claim_ms and end_ms 0, no worker, no reason.
-- A no-op job's record and payload take 40 bytes, a 48-byte allocation,
-- where version 2's took 80, a 96-byte one (benchmarks/footprint.py).
local RECORD_PATTERN_V4 = '^4|(%-?%d+)|(%d+)|(%d+)|(%d+)|(%d+)|([^|]*)|([^|]*)$'
local V4 = 52  -- string.byte('4')

-- Fields stay text as parsed (tonumber and number formatting cost more than
-- the rest of a claim); scripts call tonumber on the few they compute with.
-- A version 1 record has no `started`: its claim counted the attempt, so a
-- leased one counts as started.
local function parse_meta(raw)
  local payload
  raw, payload = split_record(raw)
  if string.byte(raw, 1) == V4 then
    local prio, seq, enq_ms, max_attempts, max_infra, name, grp =
      string.match(raw, RECORD_PATTERN_V4)
    if not prio then
      return nil
    end
    return {
      state = 'queued', token = '0', attempt = '0', work_fail = '0', infra_fail = '0',
      max_attempts = max_attempts, max_infra = max_infra, cancel = '0', started = '0',
      prio = prio, seq = seq, enq_ms = enq_ms, ready_ms = enq_ms, due_ms = '0', claim_ms = '0',
      end_ms = '0', name = name, worker = '', reason = '', grp = grp ~= '' and grp or nil,
      payload = payload,
    }
  end
  local state, token, attempt, work_fail, infra_fail, max_attempts, max_infra, cancel, started,
        prio, seq, enq_ms, ready_ms, due_ms, claim_ms, end_ms, name, worker, reason =
    string.match(raw, RECORD_PATTERN)
  local grp
  if not state then
    state, token, attempt, work_fail, infra_fail, max_attempts, max_infra, cancel, started,
      prio, seq, enq_ms, ready_ms, due_ms, claim_ms, end_ms, name, worker, reason, grp =
      string.match(raw, RECORD_PATTERN_V3)
  end
  if not state then
    state, token, attempt, work_fail, infra_fail, max_attempts, max_infra, cancel, prio,
      seq, enq_ms, ready_ms, due_ms, claim_ms, end_ms, name, worker, reason =
      string.match(raw, RECORD_PATTERN_V1)
    if not state then
      return nil
    end
    started = state == 'leased' and '1' or '0'
  end
  return {
    state = state, token = token, attempt = attempt, work_fail = work_fail,
    infra_fail = infra_fail, max_attempts = max_attempts, max_infra = max_infra,
    cancel = cancel, started = started, prio = prio, seq = seq, enq_ms = enq_ms,
    ready_ms = ready_ms, due_ms = due_ms, claim_ms = claim_ms, end_ms = end_ms, name = name,
    worker = worker, reason = reason, grp = grp, payload = payload,
  }
end

-- returns meta, or nil and 'missing' | 'malformed'
local function load_meta(jobs_key, id)
  local raw = redis.call('HGET', jobs_key, id)
  if not raw then
    return nil, 'missing'
  end
  local meta = parse_meta(raw)
  if not meta then
    return nil, 'malformed'
  end
  return meta
end

local function encode_meta(m)
  local head, tail = '2|', ''
  if m.grp and m.grp ~= '' then  -- version 3: with its park group
    head, tail = '3|', '|' .. m.grp
  end
  if m.payload then
    tail = tail .. PAYLOAD_MARK .. m.payload
  end
  return head .. m.state .. '|' .. str(m.token) .. '|' .. str(m.attempt) .. '|' ..
         str(m.work_fail) .. '|' .. str(m.infra_fail) .. '|' .. str(m.max_attempts) .. '|' ..
         str(m.max_infra) .. '|' .. str(m.cancel) .. '|' .. str(m.started) .. '|' ..
         str(m.prio) .. '|' .. str(m.seq) .. '|' .. str(m.enq_ms) .. '|' .. str(m.ready_ms) ..
         '|' .. str(m.due_ms) .. '|' .. str(m.claim_ms) .. '|' .. str(m.end_ms) .. '|' ..
         m.name .. '|' .. m.worker .. '|' .. m.reason .. tail
end

-- the record of a new job (enqueue.lua) around its seq: (head, tail), record
-- = head .. seq .. tail. A queued job's is version 4 (ready_ms is its
-- enq_ms); a scheduled job's is what encode_meta writes (version 2, or 3
-- with a park group). No record table and no per-field formatting for the
-- fields every new job has at 0 or '', and the two parts are built once per
-- run of jobs alike, so each job of a batch costs one three-part
-- concatenation (tests/test_lua_contracts.py checks parse_meta reads them
-- back, and a scheduled one against encode_meta); grp '' = no park group
local function record_around_seq(state, max_attempts, max_infra, prio, enq_ms, ready_ms, due_ms,
                                 name, grp)
  if state == 'queued' then
    return '4|' .. prio .. '|', '|' .. enq_ms .. '|' .. max_attempts .. '|' .. max_infra .. '|' ..
           name .. '|' .. grp
  end
  local version, last = '2|', ''
  if grp and grp ~= '' then
    version, last = '3|', '|' .. grp
  end
  return version .. state .. '|0|0|0|0|' .. max_attempts .. '|' .. max_infra .. '|0|0|' .. prio ..
         '|', '|' .. enq_ms .. '|' .. ready_ms .. '|' .. due_ms .. '|0|0|' .. name .. '||' .. last
end

local function save_meta(jobs_key, id, m)
  redis.call('HSET', jobs_key, id, encode_meta(m))
end

-- one call for many arguments (HMGET, HSET, ZADD, ZREM ...): a redis.call
-- costs more than the rest of a job's work, so batches are written in bulk.
-- Chunked to stay far below Lua's C-stack limit on unpack.
local BULK_CHUNK = 2000
local function bulk(command, key, args)
  local n = #args
  if n == 0 then
    return {}
  end
  if n <= BULK_CHUNK then
    return redis.call(command, key, unpack(args))
  end
  local out = {}
  for first = 1, n, BULK_CHUNK do
    local part = redis.call(command, key, unpack(args, first, math.min(n, first + BULK_CHUNK - 1)))
    if type(part) == 'table' then
      for _, v in ipairs(part) do
        out[#out + 1] = v
      end
    end
  end
  return out
end

-- the correlation id in job `id`'s payload envelope [1, corr, req,
-- kwargs(, extra)]: msgpack bytes 1-2 are the array header and the version
-- (1), the id is the str that follows (fixstr, str8 or str16; ids are at
-- most 512 bytes). Read by hand, so a large payload is never decoded. An
-- empty one is the job's own id (a producer stores '' for it, 32 bytes less
-- per job: codec.encode_envelope); '' when there is no payload.
local function envelope_corr(envelope, id)
  if not envelope then
    return ''
  end
  local b = string.byte(envelope, 3)
  if not b then
    return ''
  end
  local len, first
  if b == 160 then
    return id
  elseif b > 160 and b <= 191 then
    len, first = b - 160, 4
  elseif b == 217 then
    len, first = string.byte(envelope, 4), 5
  elseif b == 218 then
    len, first = string.byte(envelope, 4) * 256 + string.byte(envelope, 5), 6
  else
    return ''
  end
  return string.sub(envelope, first, first + len - 1)
end

-- job id's payload: inside its record, else in the payloads hash (nil: none)
local function payload_of(jobs_key, payloads_key, id)
  local raw = redis.call('HGET', jobs_key, id)
  local _, payload = split_record(raw or '')
  return payload or redis.call('HGET', payloads_key, id) or nil
end

-- append to the capped audit stream; maxlen 0 turns the trail off. Each
-- entry says who (`by`: worker:<id>, reaper, producer, schedule:<name>,
-- operator:<command>) and carries the job's correlation id, read from its
-- payload (inside its record in jobs_key, else in payloads_key: payload_of)
-- or given (corr).
local function emit(events_key, maxlen, id, event, detail, by, jobs_key, payloads_key, corr)
  if maxlen > 0 then
    if corr == nil then
      corr = jobs_key and envelope_corr(payload_of(jobs_key, payloads_key, id), id) or ''
    end
    redis.call('XADD', events_key, 'MAXLEN', '~', maxlen, '*',
               'job', id, 'event', event, 'detail', detail or '', 'corr', corr,
               'by', by or '')
  end
end

-- the origin of a new job, from its id: a schedule's fire, a re-run, or a
-- producer
local function enqueued_by(id)
  local schedule = string.match(id, '^schedule:(.+):[^:]+$')
  if schedule then
    return 'schedule:' .. string.gsub(schedule, ':manual$', '')
  end
  if string.find(id, ':rerun:%d+$') then
    return 'operator:rerun'
  end
  return 'producer'
end

-- the job is in no set when this is called; put it back at its place in line
-- (not started): its sequence number kept, in the ready set (see LINE_FLOOR),
-- or with a delay scheduled
local function requeue(meta, id, now, delay_ms, ready_key, scheduled_key)
  meta.started = 0
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

-- the job is in no set when this is called; put it in line behind what is
-- queued (not started): a new sequence number, then the back of the line, or
-- the ready set for a priority other than 0. With a delay it is scheduled
-- (its number is taken when it comes due and enters the line this way).
local function requeue_behind(meta, id, now, delay_ms, ready_key, scheduled_key, line_key,
                              stats_key)
  if delay_ms > 0 then
    return requeue(meta, id, now, delay_ms, ready_key, scheduled_key)
  end
  meta.started = 0
  meta.state = 'queued'
  meta.ready_ms = now
  meta.seq = redis.call('HINCRBY', stats_key, 'seq', 1)
  if tonumber(meta.prio) == 0 then
    redis.call('RPUSH', line_key, id)
  else
    redis.call('ZADD', ready_key, ready_score(meta), id)
  end
end

-- the job is in no set when this is called; record it as dead
local function bury(meta, id, now, reason, err, dead_key, letters_key, letters_maxlen, stats_key)
  meta.state = 'dead'
  meta.reason = reason
  meta.end_ms = now
  meta.cancel = 0
  meta.started = 0
  redis.call('ZADD', dead_key, int(now), id)
  redis.call('XADD', letters_key, 'MAXLEN', '~', letters_maxlen, '*',
             'job', id, 'name', meta.name, 'reason', reason, 'error', err,
             'attempt', str(meta.attempt), 'work_fail', str(meta.work_fail),
             'infra_fail', str(meta.infra_fail))
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

-- up to n waiters of a keyed limit, oldest first, appended to reply; entries
-- past their fallback instant go first (their jobs are back in line already)
local function pop_waiters(waiters_key, now, n, reply)
  redis.call('ZREMRANGEBYSCORE', waiters_key, '-inf', int(now))
  local popped = redis.call('ZPOPMIN', waiters_key, n)
  for i = 1, #popped, 2 do
    reply[#reply + 1] = popped[i]
  end
end

-- up to `count` tokens, the list holding at most `cap`: one RPUSH for all
-- (bulk: chunked)
local function wake(wake_key, count, cap)
  local room = cap - redis.call('LLEN', wake_key)
  local n = math.min(count, room)
  if n == 1 then  -- the common case (one job, one worker): no table
    redis.call('RPUSH', wake_key, '1')
  elseif n > 0 then
    local tokens = {}
    for i = 1, n do
      tokens[i] = '1'
    end
    bulk('RPUSH', wake_key, tokens)
  end
end

-- every trace of jobs `ids`: their records, payloads, last errors, results,
-- run logs, and what their runs left for the next one (checkpoints, saga,
-- progress: one hash, three fields per job), in six calls however many jobs
-- (each redis.call costs several times a field's own delete: a call per job
-- cost an expired record six)
local function forget_all(ids, k)
  if #ids == 0 then
    return
  end
  bulk('HDEL', k.jobs, ids)
  bulk('HDEL', k.payloads, ids)
  bulk('HDEL', k.errors, ids)
  bulk('HDEL', k.results, ids)
  bulk('HDEL', k.logs, ids)
  local fields = {}
  for _, id in ipairs(ids) do
    fields[#fields + 1] = 'c:' .. id
    fields[#fields + 1] = 's:' .. id
    fields[#fields + 1] = 'p:' .. id
  end
  bulk('HDEL', k.runstate, fields)
end

-- every trace of one job
local function forget(id, k)
  forget_all({id}, k)
end

-- take `ids` out of the sorted set `set_key` and forget the jobs whose record
-- is gone, malformed or in one of the states `ended` (a set of names; a record
-- in another state is live again, never expected, and stays): what expiry,
-- purge and the dead set's trim do with a batch, in a fixed number of calls
local function drop_ended(set_key, ids, ended, k)
  if #ids == 0 then
    return
  end
  bulk('ZREM', set_key, ids)
  local raws = bulk('HMGET', k.jobs, ids)
  local gone = {}
  for i, id in ipairs(ids) do
    local meta = raws[i] and parse_meta(raws[i])
    if not meta or ended[meta.state] then
      gone[#gone + 1] = id
    end
  end
  forget_all(gone, k)
end

-- drop_ended's `ended` of the done set (expiry) and of the dead set
local FINISHED = {succeeded = true, skipped = true, canceled = true}
local DEAD = {dead = true}

-- wake the waiters (App.wait) of jobs that just ended: only the ids a waiter
-- registered in the waiting set (watch.lua) get a token, on the list
-- `<waiting key>:<id>` (keys.py QueueKeys.notify builds the same name; a
-- batched ack cannot declare one key per waiter). The token lapses after
-- NOTIFY_TTL_MS; a waiter that missed it finds the ended state on its next
-- check. With nobody waiting this costs one ZCARD per call.
local NOTIFY_TTL_MS = 10000
local function signal(waiting_key, ids)
  if #ids == 0 or redis.call('ZCARD', waiting_key) == 0 then
    return
  end
  for _, id in ipairs(ids) do
    if redis.call('ZREM', waiting_key, id) == 1 then
      local list = waiting_key .. ':' .. id
      redis.call('RPUSH', list, '1')
      redis.call('PEXPIRE', list, NOTIFY_TTL_MS)
    end
  end
end

-- a terminal state that keeps the record for its retention, then expires it
-- k: a table with done, jobs, payloads, errors, results, logs, runstate keys
local function finish(meta, id, now, state, retention_ms, k)
  meta.state = state
  meta.end_ms = now
  meta.cancel = 0
  meta.started = 0
  if retention_ms > 0 then
    save_meta(k.jobs, id, meta)
    redis.call('ZADD', k.done, int(now + retention_ms), id)
  else
    forget(id, k)
  end
end

-- a budget: the record's own when set (> 0), else the one the worker passed
local function budget(stored, given)
  local n = tonumber(stored)
  if n > 0 then
    return n
  end
  return given
end

-- delete finished records whose retention ran out (at most `batch`); a record
-- that is live again (never expected) is left alone. Returns how many.
-- k: a table with done, jobs, payloads, errors, results, logs, runstate keys
local function expire_done(k, now, batch)
  if batch <= 0 then
    return 0
  end
  -- ZCOUNT first: when nothing is due (an ack's common case) it costs Redis
  -- under half what an empty ZRANGEBYSCORE ... LIMIT does
  local due = int(now)
  if redis.call('ZCOUNT', k.done, '-inf', due) == 0 then
    return 0
  end
  -- the batch in a fixed number of calls (ten, however many are due): with
  -- a call per record and six per forget(), a worker's acks spent eight
  -- calls on each job that finished a retention before
  local ids = redis.call('ZRANGEBYSCORE', k.done, '-inf', due, 'LIMIT', '0', int(batch))
  drop_ended(k.done, ids, FINISHED, k)
  return #ids
end

-- the dead set is capped by count and by age, trimmed by the scripts that
-- bury, at most TRIM_DEAD_BATCH of the oldest per call (so it may run over
-- dead_max by a few between calls, never by more than the burials of a call)
local TRIM_DEAD_BATCH = 20
local function trim_dead(k, dead_key, stats_key, now, dead_max, dead_retention_ms)
  local over = redis.call('ZCARD', dead_key) - dead_max
  local cutoff = now - dead_retention_ms
  local oldest = redis.call('ZRANGE', dead_key, 0, TRIM_DEAD_BATCH - 1, 'WITHSCORES')
  local ids = {}
  for i = 1, #oldest, 2 do
    if #ids >= over and tonumber(oldest[i + 1]) > cutoff then
      break
    end
    ids[#ids + 1] = oldest[i]
  end
  drop_ended(dead_key, ids, DEAD, k)
  local n = #ids
  if n > 0 then
    redis.call('HINCRBY', stats_key, 'dead', -n)
    redis.call('HINCRBY', stats_key, 'dead_trimmed', n)
  end
  return n
end

-- the error history of a job: the last ERRORS_KEPT entries joined by RS,
-- each `attempt US kind US at_ms US text` (the text never holds RS or US:
-- Python strips them). A value written before the history (plain text) stays
-- as the oldest entry until it is pushed out.
local ERRORS_KEPT = 5
local RS, US = '\30', '\31'
-- append one entry to a history kept in a hash field (entries joined by RS),
-- keeping the last `keep`: the error history and the run logs share it
local function push_entry(hash_key, id, entry, keep)
  local entries = {}
  local old = redis.call('HGET', hash_key, id)
  if old then
    for e in string.gmatch(old, '[^' .. RS .. ']+') do
      entries[#entries + 1] = e
    end
  end
  entries[#entries + 1] = entry
  local first = math.max(1, #entries - keep + 1)
  redis.call('HSET', hash_key, id, table.concat(entries, RS, first, #entries))
end

local function push_error(errors_key, id, meta, kind, now, text)
  push_entry(errors_key, id, table.concat({str(meta.attempt), kind, int(now), text}, US),
             ERRORS_KEPT)
end

-- whether the last entry of a job's error history is of `kind` with `text`
-- (its attempt and instant aside): fail.lua's own, when its call comes again
local function last_error_is(errors_key, id, kind, text)
  local history = redis.call('HGET', errors_key, id)
  if not history then
    return false
  end
  -- anchored: one pass (an unanchored '([^RS]+)$' tries each start, quadratic in
  -- an entry's length: 1.6 s in Lua 5.1 for five 4,000-character CJK tracebacks)
  local last = string.match(history, '^.*' .. RS .. '(.*)$') or history
  return string.match(last, '^[^' .. US .. ']*' .. US .. '([^' .. US .. ']*)' .. US .. '%d+'
    .. US) == kind and string.sub(last, -#text - 1) == US .. text
end

-- the captured logs of a run (ctx.log lines, capped by Python per run and
-- cut at LOG_RUN_MAX here as a last guard), kept for the last LOG_RUNS_KEPT
-- runs of the job, in the same shape as the error history
local LOG_RUNS_KEPT = 3
local LOG_RUN_MAX = 65536
local function push_log(logs_key, id, meta, outcome, now, lines)
  push_entry(logs_key, id, table.concat({str(meta.attempt), outcome, int(now),
                                         string.sub(lines, 1, LOG_RUN_MAX)}, US),
             LOG_RUNS_KEPT)
end

-- A schedule's state ({P}:schedules:state, one field per schedule):
-- `next_ms|paused|pending_ms|pending_until_ms[|taker]`, all server-clock ms;
-- paused 0|1; pending_ms: a fire taken by a worker that has not confirmed its
-- enqueue yet (0 = none), which another worker takes over after
-- pending_until_ms; taker: the scheduler that took it, its worker's id and a
-- nonce (schedule_fire's answer to its call sent again), written only while
-- a fire is pending (a state written before takers were recorded has none).
-- Returns nil for a value that is not one (edited by hand).
local SCHEDULE_PATTERN = '^(%d+)|([01])|(%d+)|(%d+)$'
local SCHEDULE_TAKEN_PATTERN = '^(%d+)|([01])|(%d+)|(%d+)|([%w_.:-]+)$'
local function parse_schedule(raw)
  if not raw then
    return nil
  end
  local next_ms, paused, pending, until_ms = string.match(raw, SCHEDULE_PATTERN)
  local taker = ''
  if not next_ms then
    next_ms, paused, pending, until_ms, taker = string.match(raw, SCHEDULE_TAKEN_PATTERN)
    if not next_ms then
      return nil
    end
  end
  return {next_ms = tonumber(next_ms), paused = paused, pending = tonumber(pending),
          until_ms = tonumber(until_ms), taker = taker}
end

local function save_schedule(state_key, name, s)
  local fields = {int(s.next_ms), s.paused, int(s.pending), int(s.until_ms)}
  if s.pending > 0 and s.taker and s.taker ~= '' then
    fields[5] = s.taker
  end
  redis.call('HSET', state_key, name, table.concat(fields, '|'))
end

-- circuit breakers: a transition to the breakers' capped audit stream
local function breaker_event(events_key, maxlen, name, event, detail)
  if maxlen > 0 then
    redis.call('XADD', events_key, 'MAXLEN', '~', maxlen, '*',
               'breaker', name, 'event', event, 'detail', detail or '')
  end
end

-- circuit breakers: open (or re-open) for cooldown_ms from now, forgetting
-- the failures that tripped it and any probe
local function breaker_open(state_key, failures_key, now, cooldown_ms)
  redis.call('DEL', failures_key)
  redis.call('HSET', state_key, 'state', 'open', 'until_ms', int(now + cooldown_ms),
             'cooldown_ms', int(cooldown_ms), 'probe', '', 'probe_until', 0,
             'changed_ms', int(now))
  redis.call('HINCRBY', state_key, 'trips', 1)
end
