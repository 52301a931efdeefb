-- ack.lua: finish leased jobs without failure (succeeded, skipped, or
-- canceled after a cancel request), fenced by token; a batch in one call.
-- A run that was leased but never marked started did run: its attempt is
-- counted now. Then expire up to `expire_batch` finished records whose
-- retention ran out, so retention keeps pace with the rate work finishes.
-- KEYS[1] leases       ZSET   leased ids
-- KEYS[2] jobs         HASH   id -> job record
-- KEYS[3] payloads     HASH   id -> payload
-- KEYS[4] errors       HASH   id -> error history
-- KEYS[5] results      HASH   id -> result (msgpack)
-- KEYS[6] done         ZSET   finished ids, score = expiry of the record (ms)
-- KEYS[7] stats        HASH   counters
-- KEYS[8] events       STREAM audit trail
-- KEYS[9] logs         HASH   id -> captured run logs
-- KEYS[10] waiting      ZSET   ids someone waits for (App.wait)
-- KEYS[11] runstate     HASH   c:/s:/p:<id> -> checkpoints, saga, progress
-- ARGV[1] events_maxlen    int   cap of the events stream, 0 = no trail
-- ARGV[2] audit_all        0|1   also record the hot transitions (succeeded)
-- ARGV[3] outcome          str   succeeded | skipped | canceled, for the whole batch
-- ARGV[4] retention_ms     int   how long the records are kept (0 = delete now)
-- ARGV[5] expire_batch     int   most expired finished records deleted by this call
-- ARGV[6..] per job, 5 values: id, token, result (bytes, '' = none),
--           note (str, '' = none; else kept in the error history as kind 'note'),
--           logs (str, '' = none; else kept as this run's captured log lines)
-- Returns: per job CODE_FINISHED, or CODE_REFUSED (stale token or not leased)
-- Sent again (the client resends a call whose reply was lost): a job this
-- token's run already finished with this outcome answers CODE_FINISHED again
-- and nothing is written twice; a record not kept (retention 0) is gone, and
-- the second run answers CODE_REFUSED.
local CODE_REFUSED, CODE_FINISHED = 0, 1
local leases_key, jobs_key, payloads_key, errors_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local results_key, done_key, stats_key, events_key = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local logs_key, waiting_key = KEYS[9], KEYS[10]
local events_maxlen = tonumber(ARGV[1])
local audit_all = ARGV[2] == '1'
local outcome, retention_ms = ARGV[3], tonumber(ARGV[4])
local expire_batch = tonumber(ARGV[5])
local FIELDS = 5
local k = {done = done_key, jobs = jobs_key, payloads = payloads_key, errors = errors_key,
           results = results_key, logs = logs_key,
           runstate = KEYS[11]}

local now = now_ms()
local now_text = int(now)
local ids = {}  -- the other values of a job are read from ARGV where used
for base = 6, #ARGV, FIELDS do
  ids[#ids + 1] = ARGV[base]
end
local raws = bulk('HMGET', jobs_key, ids)

local reply = {}
local finished = 0
local leases, records, done, results = {}, {}, {}, {}
local done_until = int(now + retention_ms)
local finished_now = {}  -- an id named twice in one batch finishes once
-- the finished jobs not kept (retention 0): forgotten together after the loop,
-- in forget_all's six calls, where a forget() each took six calls a job
local forgotten = {}
for i, id in ipairs(ids) do
  local base = 6 + (i - 1) * FIELDS
  local result = ARGV[base + 2]
  -- The common ack (a leased record of version 2 or 3, its token as sent, kept
  -- for retention with no note or logs, or not kept) finishes from the record's text, as
  -- claim.lua leases: FINISH_PATTERN captures what stays, the new record is
  -- joined around what the finish sets, without parse_meta's table and
  -- encode_meta (test_an_ack_writes_what_encode_meta_writes). Everything else
  -- takes the general path below.
  local raw = raws[i]
  local v, tok, att, budgets, started, middle, name, worker, tail
  if raw and not finished_now[id] and (retention_ms == 0 or (ARGV[base + 3] == ''
      and ARGV[base + 4] == '')) then
    v, tok, att, budgets, started, middle, name, worker, tail = string.match(raw, FINISH_PATTERN)
    if tok ~= ARGV[base + 1] then
      v = nil  -- another token (or the same one written otherwise): the general path decides
    elseif v == '2' then  -- the tail: as in claim.lua (no '|' but the mark's)
      local bar = string.find(tail, '|', 1, true)
      v = (not bar or string.byte(tail, bar + 1) == 0) and v
    elseif v then
      local rest = string.match(tail, '^[^|]*|[^|]+(.?.?)')
      v = (rest == '' or rest == PAYLOAD_MARK) and v
    end
  end
  -- by: the finishing run's worker, when this id finishes; record: its
  -- finished record, when it is kept for retention (else it is forgotten)
  local by, record, meta
  if v then
    by = worker
    if retention_ms > 0 then
      if started ~= '1' then
        att = int(tonumber(att) + 1)  -- it ran: the attempt counts
      end
      record = v .. '|' .. outcome .. '|' .. tok .. '|' .. att .. '|' .. budgets .. '|0|0|' ..
        middle .. '|' .. now_text .. '|' .. name .. '|' .. worker .. '|' .. tail
    end
  else
    meta = raws[i] and not finished_now[id] and parse_meta(raws[i])
    if meta and meta.state == 'leased' and tonumber(meta.token) == tonumber(ARGV[base + 1]) then
      by = meta.worker
      if meta.started ~= '1' then
        meta.attempt = tonumber(meta.attempt) + 1  -- it ran: the attempt counts
      end
      if retention_ms > 0 then
        meta.state = outcome
        meta.end_ms = now_text
        meta.cancel = '0'
        meta.started = '0'
        record = encode_meta(meta)
        local note, logs = ARGV[base + 3], ARGV[base + 4]
        if note ~= '' then
          push_error(errors_key, id, meta, 'note', now, note)
        end
        if logs ~= '' then
          push_log(logs_key, id, meta, outcome, now, logs)
        end
      end
    end
  end
  if by then
    finished_now[id] = true
    leases[#leases + 1] = id
    if audit_all or outcome ~= 'succeeded' then  -- before finish may forget the payload
      emit(events_key, events_maxlen, id, outcome, '', 'worker:' .. by, jobs_key, payloads_key)
    end
    if record then
      records[#records + 1] = id
      records[#records + 1] = record
      done[#done + 1] = done_until
      done[#done + 1] = id
      if result ~= '' then
        results[#results + 1] = id
        results[#results + 1] = result
      end
    else
      forgotten[#forgotten + 1] = id  -- retention 0: every trace goes, after the loop
    end
    finished = finished + 1
    reply[#reply + 1] = CODE_FINISHED
  elseif meta and meta.state == outcome and tonumber(meta.token) == tonumber(ARGV[base + 1]) then
    reply[#reply + 1] = CODE_FINISHED  -- this run's ack sent again: finished so already
  else
    reply[#reply + 1] = CODE_REFUSED
  end
end
bulk('ZREM', leases_key, leases)
bulk('HSET', jobs_key, records)
bulk('ZADD', done_key, done)
bulk('HSET', results_key, results)
forget_all(forgotten, k)
signal(waiting_key, leases)
if finished > 0 then
  redis.call('HINCRBY', stats_key, outcome, int(finished))
end
expire_done(k, now, expire_batch)
return reply
