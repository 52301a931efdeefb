-- claim.lua: promote due scheduled jobs (bounded), then lease up to `count`
-- ready jobs in priority/FIFO order: give each run a new fencing token and
-- set the lease expiry from the server clock. The first `start_now` jobs are
-- started at once (their attempt counted); the rest are leased not started
-- (start.lua starts them; a lease that expires unstarted is no attempt).
-- Tokens come from the queue's counter key, and a job's new token is always
-- above its last one, so a token never repeats for a job even when the
-- counter is lost.
-- A claim is idempotent by `claim_id`: the worker's claim key remembers the
-- last claim's jobs; a retry with the same claim_id (a reply lost on the wire
-- and the call sent again) returns those still leased with their tokens,
-- renews their leases from now (the worker counts its lease from the retry's
-- send: returned with the first call's expiry, a run could outlive its lease
-- by the time between the two calls — found by model/lease.pml,
-- BUG_RETRY_OLD_LEASE) and leases nothing new.
-- A paused queue (its paused key is set: a string, read with MGET) leases
-- nothing: the check is in this script, so no claim that runs after the pause
-- was written leases a job. Due scheduled jobs are still promoted, and a
-- retried claim still gets the jobs it leased before the pause.
-- KEYS[1] ready        ZSET   claimable ids of a priority other than 0, and put back at their place
-- KEYS[2] scheduled    ZSET   delayed ids, score = due ms
-- KEYS[3] leases       ZSET   leased ids, score = lease expiry ms
-- KEYS[4] jobs         HASH   id -> job record
-- KEYS[5] payloads     HASH   id -> payload
-- KEYS[6] dead         ZSET   dead ids, score = dead ms
-- KEYS[7] deadletters  STREAM dead-letter entries
-- KEYS[8] stats        HASH   counters (seq; token of old data, read once)
-- KEYS[9] events       STREAM audit trail
-- KEYS[10] token        STRING the fencing token counter
-- KEYS[11] paused       STRING set while the queue is paused: nothing is leased
-- KEYS[12] parked       HASH   park group -> `next_us|interval_us` (release.lua; see 2. below)
-- KEYS[13] line         LIST   queued ids of priority 0, in claim order (_lib.lua, LINE_FLOOR)
-- KEYS[14] claim        STRING this worker's last claim: claim_id, lease until, token range; PX lease_ms
-- ARGV[1] count            int   most jobs to lease
-- ARGV[2] lease_ms         int   lease duration
-- ARGV[3] worker_id        str   holder, recorded on the job
-- ARGV[4] promote_batch    int   most scheduled jobs promoted in this call
-- ARGV[5] events_maxlen    int   cap of the events stream, 0 = no trail
-- ARGV[6] audit_all        0|1   also record the hot transitions (claimed)
-- ARGV[7] letters_maxlen   int   cap of the dead-letter stream
-- ARGV[8] start_now        int   how many of the leased jobs start now (attempt counted)
-- ARGV[9] claim_id         str   this call's id ([A-Za-z0-9_.:-]); the same id = a retry
-- Returns: {now_ms, next_due_in_ms (-1: nothing scheduled), n, then per job 11
--          values: id, token, attempt, name, payload, max_attempts, max_infra,
--          work_fail, infra_fail, enq_ms, started (0|1)}
-- Sent again: the claim key names this claim id, so the second run takes step 0: it answers
-- the jobs the first leased (those still leased to this worker) with the same tokens,
-- attempts and payloads, renews their leases and the claim key from its own clock, and leases,
-- promotes and counts nothing more. A first run that leased nothing wrote no claim key: the
-- second is a new claim (it may lease jobs that came since).
local ready_key, scheduled_key, leases_key, jobs_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local payloads_key, dead_key, letters_key = KEYS[5], KEYS[6], KEYS[7]
local stats_key, events_key, token_key, paused_key = KEYS[8], KEYS[9], KEYS[10], KEYS[11]
local parked_key, line_key, claim_key = KEYS[12], KEYS[13], KEYS[14]
local count = tonumber(ARGV[1])
local lease_ms = tonumber(ARGV[2])
local worker_id = ARGV[3]
local events_maxlen = tonumber(ARGV[5])
local audit_all = ARGV[6] == '1'
local letters_maxlen = tonumber(ARGV[7])
local start_now = tonumber(ARGV[8])
local claim_id = ARGV[9]

local now = now_ms()
local now_text = int(now)
local lease_until = int(now + lease_ms)

local jobs = {}
local n = 0
-- token and attempt are numbers: they go back as integer replies, no formatting
local function add_job(id, token, attempt, name, payload, max_attempts, max_infra, work_fail,
                       infra_fail, enq_ms, started)
  n = n + 1
  local j = #jobs
  jobs[j + 1] = id
  jobs[j + 2] = token
  jobs[j + 3] = attempt
  jobs[j + 4] = name
  jobs[j + 5] = payload or ''
  jobs[j + 6] = max_attempts
  jobs[j + 7] = max_infra
  jobs[j + 8] = work_fail
  jobs[j + 9] = infra_fail
  jobs[j + 10] = enq_ms
  jobs[j + 11] = started
end
local function add_meta(id, meta, payload)
  add_job(id, tonumber(meta.token), tonumber(meta.attempt), meta.name, payload,
          meta.max_attempts, meta.max_infra, meta.work_fail, meta.infra_fail, meta.enq_ms,
          meta.started == '1' and 1 or 0)
end

local more_ready = false  -- jobs parked or stale entries in the way: claim again at once
-- first: the first entry of the scheduled set (ZRANGE 0 0 WITHSCORES), read
-- here when not given
local function reply_with_jobs(first)
  local next_due = -1
  if more_ready then
    next_due = 0
  else
    first = first or redis.call('ZRANGE', scheduled_key, '0', '0', 'WITHSCORES')
    if #first > 0 then
      next_due = math.max(0, tonumber(first[2]) - now)
    end
  end
  local reply = {int(now), int(next_due), n}
  for i = 1, #jobs do
    reply[3 + i] = jobs[i]
  end
  return reply
end

-- 0. a retried call: the jobs of the first call that are still leased to it.
-- The claim key holds `claim_id \n lease_until \n lo \n hi`: every job of
-- that call was leased until lease_until (its score in the leases set, which
-- nothing changes before the worker learns the job) with a token in [lo, hi].
-- Token ranges of claims never overlap (the counter only grows, and catches
-- up with the highest token it hands out), so the range names the call's jobs
-- without a list: the hot path writes a few bytes per call, nothing per job.
-- (one MGET reads it and the paused key, checked in step 2)
local last_and_paused = redis.call('MGET', claim_key, paused_key)
local last, paused = last_and_paused[1], last_and_paused[2]
if last then
  local head, until_text, lo, hi = string.match(last, '^([^\n]*)\n(%d+)\n(%d+)\n(%d+)$')
  if head == claim_id then
    lo, hi = tonumber(lo), tonumber(hi)
    local ids = redis.call('ZRANGEBYSCORE', leases_key, until_text, until_text)
    local raws = bulk('HMGET', jobs_key, ids)
    local mine = {}
    for i, id in ipairs(ids) do
      local meta = raws[i] and parse_meta(raws[i])
      local token = meta and tonumber(meta.token)
      if meta and meta.state == 'leased' and meta.worker == worker_id and token >= lo
          and token <= hi then
        mine[#mine + 1] = {token, id, meta}
      end
    end
    table.sort(mine, function(a, b) return a[1] < b[1] end)  -- the first call's order
    -- renewed from now: the worker counts each lease from this call's send
    -- (model/lease.pml, BUG_RETRY_OLD_LEASE: the first call's expiry would
    -- let a run outlive its lease), and the claim key follows the new expiry
    local renewed = {}
    for _, m in ipairs(mine) do
      renewed[#renewed + 1] = lease_until
      renewed[#renewed + 1] = m[2]
      add_meta(m[2], m[3], m[3].payload or redis.call('HGET', payloads_key, m[2]))
    end
    bulk('ZADD', leases_key, renewed)
    redis.call('SET', claim_key, claim_id .. '\n' .. lease_until .. '\n' .. int(lo) .. '\n' ..
               int(hi), 'PX', ARGV[2])
    return reply_with_jobs()
  end
end

-- 1. promote due scheduled jobs; a retry enters the line behind what is queued.
-- The first scheduled entry says whether any is due; when none is, it is also
-- the reply's next due (leasing does not touch the scheduled set): one call.
local first = redis.call('ZRANGE', scheduled_key, '0', '0', 'WITHSCORES')
if #first > 0 and tonumber(first[2]) <= now then
  local due = redis.call('ZRANGEBYSCORE', scheduled_key, '-inf', now_text, 'LIMIT', '0',
                         ARGV[4])
  for _, id in ipairs(due) do
    redis.call('ZREM', scheduled_key, id)
    local meta, problem = load_meta(jobs_key, id)
    if meta and meta.state == 'scheduled' then
      requeue_behind(meta, id, now, 0, ready_key, scheduled_key, line_key, stats_key)
      save_meta(jobs_key, id, meta)
    elseif problem == 'malformed' then
      bury_malformed(id, now, dead_key, letters_key, letters_maxlen, stats_key)
    end
  end
  first = nil  -- the set changed: the reply reads it again
end

-- 2. lease, reading and writing the batch with one call per key.
-- Parking: a job with a park group (its rate key, set at enqueue) whose group
-- is parked is not leased. A group is parked while a worker found its key over
-- the rate more than 50 ms ahead (release.lua records when the
-- key's next start is expected, and one interval). Such a job is scheduled to
-- the group's next expected start, and the next one parked one interval
-- after it: a busy key's backlog leaves the line here, in Redis, with no
-- round trip per job. A job is parked once (its group is cleared): when it
-- comes due it is leased, and the worker's rate check decides.
if paused then
  count = 0
end
local PARK_SCAN = 256
local now_us = now * 1000
local parks = {}  -- grp -> {next_us, interval_us, changed} or false: read once per call
-- (these two take what they use as arguments: a closure over the script's
-- locals costs more to make, on every call, than the hot path can spare)
local function park_of(parks_, parked_key_, grp, now_us_)
  local park = parks_[grp]
  if park == nil then
    park = false
    local raw = redis.call('HGET', parked_key_, grp)
    if raw then
      local next_us, interval_us = string.match(raw, '^(%d+)|(%d+)$')
      next_us, interval_us = tonumber(next_us), tonumber(interval_us)
      if next_us and next_us > now_us_ + 50000 then  -- more than 50 ms ahead: parked
        park = {next_us, interval_us, false}
      else
        redis.call('HDEL', parked_key_, grp)  -- caught up (or unreadable): not parked
      end
    end
    parks_[grp] = park
  end
  return park
end
-- schedule a queued job of a parked group to the group's next expected start
-- (audit: false, or {events_key, events_maxlen, by, payloads_key} under audit_all)
local function park_job(id, meta, park, records, later, audit)
  meta.grp = nil  -- parked once
  meta.state = 'scheduled'
  meta.due_ms = math.ceil(park[1] / 1000)
  park[1] = park[1] + park[2]
  park[3] = true
  later[#later + 1] = meta.due_ms
  later[#later + 1] = id
  records[#records + 1] = id
  records[#records + 1] = encode_meta(meta)
  if audit then
    emit(audit[1], audit[2], id, 'parked', 'rate group', audit[3], audit[4],
         audit[5])
  end
end
-- the next `want` (text) ids in claim order (_lib.lua, LINE_FLOOR): the ready
-- set's entries below LINE_FLOOR, then the line, then the ready set's rest;
-- and where each came from: its score (text), or false for the line. A ready
-- set of negative priorities only, behind a line that fills the call, is
-- popped and put back: the common case (an empty ready set) costs one ZPOPMIN
-- of nothing, where a peek first would cost a call in every case.
local function pop_ready(ready_key_, line_key_, want)
  local popped = redis.call('ZPOPMIN', ready_key_, want)
  local ids, places, got = {}, {}, 0
  local i = 1
  while i < #popped and tonumber(popped[i + 1]) < LINE_FLOOR do
    got = got + 1
    ids[got], places[got] = popped[i], popped[i + 1]
    i = i + 2
  end
  local room = tonumber(want) - got
  if room > 0 then
    local line = redis.call('LPOP', line_key_, int(room))
    if line then
      for _, id in ipairs(line) do
        got = got + 1
        ids[got], places[got] = id, false
      end
      room = room - #line
    end
  end
  local back = {}
  for j = i, #popped - 1, 2 do
    if room > 0 then
      room = room - 1
      got = got + 1
      ids[got], places[got] = popped[j], popped[j + 1]
    else
      back[#back + 1] = popped[j + 1]
      back[#back + 1] = popped[j]
    end
  end
  bulk('ZADD', ready_key_, back)
  return ids, places
end
-- The next `want` ids whose record is queued (or malformed: the lease loop
-- buries it), and their records. A stale entry, whose job left the
-- line or the ready set (canceled there, or leased or finished since), is
-- dropped, counted as garbage, and another is popped in its place, so a claim
-- behind stale entries is not answered empty: at most STALE_POPS pops; the
-- last return is true when that bound left stale entries in the way (the
-- reply then says claim again now). Stale entries of the line are also taken
-- off cancel.lua's line_stale count (which never goes below 0).
local STALE_POPS = 8
local function pop_queued(ready_key_, line_key_, jobs_key_, stats_key_, want)
  local ids, raws = {}, {}
  local stale, in_line, dropped = 0, 0, 0
  -- An id can have more than one entry: a canceled job's stale line entry
  -- stays, and the id, deleted and enqueued again (or put back in the ready
  -- set), has a live one besides. Its record is queued, so both read as
  -- live: one call must not lease it twice. The first entry taken is its
  -- run; another in the same call is stale (seen), as is a line entry of a
  -- job whose home is the ready set (popped in this call, or still in it).
  local seen = {}
  local counted  -- the stats' line_stale, read when a line entry needs it
  for _ = 1, STALE_POPS do
    local got, at = pop_ready(ready_key_, line_key_, int(want))
    local recs = bulk('HMGET', jobs_key_, got)
    local from_ready = {}
    for i, id in ipairs(got) do
      if at[i] then
        from_ready[id] = true
      end
    end
    dropped = 0
    for i, id in ipairs(got) do
      local raw = recs[i]
      -- the state is read by hand first (version 4, or '<version>|queued|');
      -- a record in another state (or unreadable: kept, to be buried) is parsed
      local drop = not raw or seen[id] or (string.byte(raw, 1) ~= V4 and
                   string.sub(raw, 2, 9) ~= '|queued|' and parse_meta(raw))
      if not drop and not at[i] then
        if from_ready[id] then
          drop = true
        else
          counted = counted or tonumber(redis.call('HGET', stats_key_, 'line_stale') or '0') or 0
          drop = counted > 0 and redis.call('ZSCORE', ready_key_, id) ~= false
        end
      end
      if drop then
        dropped = dropped + 1
        in_line = in_line + (at[i] and 0 or 1)
      else
        seen[id] = true
        ids[#ids + 1], raws[#raws + 1] = id, raw
      end
    end
    stale = stale + dropped
    if dropped == 0 or #got < want then
      dropped = 0
      break
    end
    want = dropped
  end
  if stale > 0 then
    redis.call('HINCRBY', stats_key_, 'garbage', int(stale))
  end
  if in_line > 0 then
    counted = counted or tonumber(redis.call('HGET', stats_key_, 'line_stale') or '0') or 0
    if counted > 0 then
      redis.call('HINCRBY', stats_key_, 'line_stale', int(-math.min(counted, in_line)))
    end
  end
  return ids, raws, dropped > 0
end
-- the fencing token of the next run leased by this call: the counter's next
-- (token + 1), or one above the job's last token when that is higher (the
-- counter was lost). Returns it, the counter's next and the highest handed out
local function fence(old, token, highest)
  token = token + 1
  local mine = tonumber(old) + 1
  if mine < token then
    mine = token
  elseif mine > highest then
    highest = mine
  end
  return mine, token, highest
end
local parked, later = 0, {}
local audit = audit_all and {events_key, events_maxlen, 'worker:' .. worker_id, jobs_key,
                               payloads_key}
if count > 0 then
  local ids, raws
  ids, raws, more_ready = pop_queued(ready_key, line_key, jobs_key, stats_key, count)
  -- each leased job's payload: inside its record (split_record), read as the
  -- record is; else from the payloads hash after the loop, for those jobs
  -- only, in one call, into the reply's place add_job left for it
  local elsewhere, at = {}, {}
  local function payload_later(id)
    elsewhere[#elsewhere + 1] = id
    at[#elsewhere] = #jobs + 5  -- add_job's payload, next
  end
  -- reserve one token per popped id (unused ones leave harmless gaps)
  local token, top = 0, 0
  if #ids > 0 then
    top = redis.call('INCRBY', token_key, int(#ids))
    if top == #ids then
      -- the counter was just created: continue from the old counter, if any
      local old = tonumber(redis.call('HGET', stats_key, 'token') or '0') or 0
      if old > 0 then
        top = redis.call('INCRBY', token_key, int(old))
      end
    end
    token = top - #ids
  end
  local highest = top
  local records, leases = {}, {}
  for i, id in ipairs(ids) do
    -- A queued record of version 2, 3 or 4 whose group is not parked is
    -- leased from its text: LEASE_PATTERN (RECORD_PATTERN_V4) captures the
    -- fields that stay as they are, and the new record is joined around the
    -- ones the lease sets. parse_meta's table and encode_meta cost some 28k
    -- Redis instructions a job more (test_a_lease_writes_what_encode_meta_writes
    -- holds the two to one text). Anything else (version 1, a parked group, a
    -- malformed record) takes the general path below.
    local raw = raws[i]
    local v, tok, att, wf, inf, ma, mi, cancel, prio_seq, enq, ready_due, end_ms, name, tail
    local payload  -- inside the record, when it is there
    if raw and string.byte(raw, 1) == V4 then
      -- a job as enqueued: its implied fields are the ones version 2 or 3 spells out
      local fields, prio, seq, grp
      fields, payload = split_record(raw)
      prio, seq, enq, ma, mi, name, grp = string.match(fields, RECORD_PATTERN_V4)
      if prio and (grp == '' or not park_of(parks, parked_key, grp, now_us)) then
        v, tok, att, wf, inf, cancel = (grp == '' and '2' or '3'), '0', '0', '0', '0', '0'
        prio_seq, ready_due, end_ms = prio .. '|' .. seq, enq .. '|0', '0'
        tail = grp == '' and '' or '|' .. grp  -- the reason (none), then the park group
        if payload then
          tail = tail .. PAYLOAD_MARK .. payload
        end
      else
        payload = nil
      end
    elseif raw then
      v, tok, att, wf, inf, ma, mi, cancel, prio_seq, enq, ready_due, end_ms, name, tail =
        string.match(raw, LEASE_PATTERN)
      -- the tail: the reason, version 3's park group, then PAYLOAD_MARK and the
      -- payload when it is inside the record (rest: '' or the mark)
      if v == '2' then  -- no park group after the reason: no '|' but the mark's
        local bar = string.find(tail, '|', 1, true)
        v = (not bar or string.byte(tail, bar + 1) == 0) and v
        payload = v and bar and string.sub(tail, bar + 2)
      elseif v then
        local grp, rest = string.match(tail, '^[^|]*|([^|]+)(.?.?)')
        v = grp and (rest == '' or rest == PAYLOAD_MARK) and
            not park_of(parks, parked_key, grp, now_us) and v
        if v and rest ~= '' then
          payload = select(2, split_record(tail))
        end
      end
    end
    local record  -- the leased record, when this id is leased
    if v then
      local mine
      mine, token, highest = fence(tok, token, highest)
      local attempt, started, started_text = tonumber(att), 0, '0'
      if n < start_now then
        attempt, started, started_text, att = attempt + 1, 1, '1', int(attempt + 1)
      end
      record = v .. '|leased|' .. int(mine) .. '|' .. att .. '|' .. wf .. '|' .. inf .. '|' ..
        ma .. '|' .. mi .. '|' .. cancel .. '|' .. started_text .. '|' .. prio_seq .. '|' ..
        enq .. '|' .. ready_due .. '|' .. now_text .. '|' .. end_ms .. '|' .. name .. '|' ..
        worker_id .. '|' .. tail
      if not payload then
        payload_later(id)
      end
      add_job(id, mine, attempt, name, payload, ma, mi, wf, inf, enq, started)
    else
      local meta = raws[i] and parse_meta(raws[i])
      local park = meta and meta.grp and meta.state == 'queued' and
                   park_of(parks, parked_key, meta.grp, now_us)
      if park then
        park_job(id, meta, park, records, later, audit)
        parked = parked + 1
      elseif meta then  -- queued: pop_queued dropped every other state
        meta.state = 'leased'
        if n < start_now then
          meta.started = '1'
          meta.attempt = tonumber(meta.attempt) + 1
        else
          meta.started = '0'
        end
        meta.token, token, highest = fence(meta.token, token, highest)
        meta.worker = worker_id
        meta.claim_ms = now_text
        record = encode_meta(meta)
        if not meta.payload then
          payload_later(id)
        end
        add_meta(id, meta, meta.payload)
      else
        -- pop_queued kept queued records and unreadable ones only
        bury_malformed(id, now, dead_key, letters_key, letters_maxlen, stats_key)
      end
    end
    if record then
      records[#records + 1] = id
      records[#records + 1] = record
      leases[#leases + 1] = lease_until
      leases[#leases + 1] = id
      if audit_all then
        emit(events_key, events_maxlen, id, 'claimed', worker_id, 'worker:' .. worker_id,
             jobs_key, payloads_key)
      end
    end
  end
  if #elsewhere > 0 then
    local got = bulk('HMGET', payloads_key, elsewhere)
    for k, place in ipairs(at) do
      jobs[place] = got[k] or ''
    end
  end
  if highest > top then
    redis.call('SET', token_key, int(highest))  -- the counter catches up with the records
  end
  bulk('HSET', jobs_key, records)
  bulk('ZADD', leases_key, leases)
  if n > 0 then
    redis.call('SET', claim_key, claim_id .. '\n' .. lease_until .. '\n' .. int(top - #ids + 1) ..
               '\n' .. int(highest), 'PX', ARGV[2])
  end
end

-- the rest of a parked group's run behind this batch is parked too (up to
-- PARK_SCAN jobs a call), so the jobs of other keys behind it are reached at
-- once: the first job that is not of a parked group goes back to its place
-- (its score kept, or the front of the line) and the claim answers next_due 0
-- (claim again now)
if parked > 0 then
  local stop = false
  while not stop and parked < PARK_SCAN do
    local ids, places = pop_ready(ready_key, line_key, '32')
    if #ids == 0 then
      break
    end
    local raws = bulk('HMGET', jobs_key, ids)
    local records, back, front = {}, {}, {}
    for i, id in ipairs(ids) do
      local meta = not stop and raws[i] and parse_meta(raws[i])
      local park = meta and meta.grp and meta.state == 'queued' and parked < PARK_SCAN and
                   park_of(parks, parked_key, meta.grp, now_us)
      if park then
        park_job(id, meta, park, records, later, audit)
        parked = parked + 1
      else
        stop = true
        if places[i] then
          back[#back + 1] = places[i]
          back[#back + 1] = id
        else
          table.insert(front, 1, id)  -- LPUSH puts the last one given first
        end
      end
    end
    bulk('HSET', jobs_key, records)
    bulk('ZADD', ready_key, back)
    bulk('LPUSH', line_key, front)
  end
  bulk('ZADD', scheduled_key, later)
  first = nil  -- the scheduled set changed: the reply reads it again
  local furthest = 0
  for grp, park in pairs(parks) do
    if park and park[3] then
      redis.call('HSET', parked_key, grp, int(park[1]) .. '|' .. int(park[2]))
      furthest = math.max(furthest, park[1])
    end
  end
  -- the entries go with the hash a minute after the furthest expected start
  local keep_ms = math.ceil((furthest - now_us) / 1000) + 60000
  if redis.call('PTTL', parked_key) < keep_ms then
    redis.call('PEXPIRE', parked_key, keep_ms)
  end
  if n < count and (redis.call('ZCARD', ready_key) > 0 or redis.call('LLEN', line_key) > 0) then
    more_ready = true
  end
end

return reply_with_jobs(first)
