-- claim_line.lua: claim.lua for the common case, with less made on every
-- call: lease up to `count` jobs from the front of the line when every one
-- of them is a job as enqueued (a version 4 record, queued, no park group)
-- and nothing asks for claim.lua's other steps. What claim.lua's lease of
-- those jobs writes, this writes (the same records, lease entries, fencing
-- tokens and claim key; tests/test_claim_line.py holds the two scripts to
-- the same writes and replies). Anything else writes nothing and answers
-- CODE_GENERAL, and the client sends the same claim (the same claim id) to
-- claim.lua: a retried claim id, a paused queue, a scheduled job due, an
-- entry in the ready set, or a record at the front of the line that is not a
-- plain version 4 one, or an id twice in it (the front is read with
-- LRANGE, and popped only once every record in it is known plain). Each
-- KEYS or ARGV entry is a Lua string and a Redis object a call, and each
-- helper a closure (benchmarks/results/claim_line.txt).
-- KEYS[1] ready        ZSET   must be empty (else claim.lua: priorities, jobs put back)
-- KEYS[2] scheduled    ZSET   delayed ids, score = due ms: none due (else claim.lua)
-- KEYS[3] leases       ZSET   leased ids, score = lease expiry ms
-- KEYS[4] jobs         HASH   id -> job record
-- KEYS[5] payloads     HASH   id -> payload (a leased job's payload not inside its record)
-- KEYS[6] stats        HASH   counters (token of old data, read once)
-- KEYS[7] token        STRING the fencing token counter
-- KEYS[8] paused       STRING set while the queue is paused (else claim.lua)
-- KEYS[9] line         LIST   queued ids of priority 0, in claim order
-- KEYS[10] claim       STRING this worker's last claim: claim_id, lease until, token range; PX lease_ms
-- ARGV[1] count            int   most jobs to lease (at most 100: CLAIM_LINE_MAX)
-- ARGV[2] lease_ms         int   lease duration
-- ARGV[3] worker_id        str   holder, recorded on the job
-- ARGV[4] start_now        int   how many of the leased jobs start now (attempt counted)
-- ARGV[5] claim_id         str   this call's id ([A-Za-z0-9_.:-]); the same id = a retry
-- Returns: claim.lua's reply ({now_ms, next_due_in_ms (-1: nothing scheduled),
--          n, then per job 11 values}), or CODE_GENERAL when claim.lua must
--          take the call (nothing written).
-- Sent again: the claim key names this claim id, so the second run writes nothing and answers
-- CODE_GENERAL; the client sends the call to claim.lua, whose retry answers the jobs the first
-- run leased (same tokens, leases renewed). A first run that leased nothing (or answered
-- CODE_GENERAL) wrote nothing: the second is a new call.
local CODE_GENERAL = 0
local claim_id = ARGV[5]
-- a retry of this claim id (the claim key names the last claim first), or a
-- paused queue: claim.lua's steps 0 and 2
local last_and_paused = redis.call('MGET', KEYS[10], KEYS[8])
local last = last_and_paused[1]
if last_and_paused[2] or (last and string.sub(last, 1, #claim_id + 1) == claim_id .. '\n') then
  return CODE_GENERAL
end
local t = redis.call('TIME')
local now_text = ms_text(t)
local now = tonumber(now_text)
-- a scheduled job due (claim.lua promotes it first), or a job in the ready set
-- (claim.lua takes those of priority above 0 before the line)
local first = redis.call('ZRANGE', KEYS[2], '0', '0', 'WITHSCORES')
if (#first > 0 and tonumber(first[2]) <= now) or redis.call('ZCARD', KEYS[1]) > 0 then
  return CODE_GENERAL
end
local next_due = #first > 0 and int(tonumber(first[2]) - now) or '-1'
-- the front of the line, read: nothing is written until every id is known
-- to be one this script leases (a hand-over writes nothing, and needs no
-- command claim.lua's role lacks)
local ids = ARGV[1] ~= '0' and redis.call('LRANGE', KEYS[9], '0', int(tonumber(ARGV[1]) - 1))
if not ids or #ids == 0 then
  return {now_text, next_due, 0}
end
local jobs_key, n = KEYS[4], #ids
local raws = redis.call('HMGET', jobs_key, unpack(ids))
local reply = {now_text, next_due, n}
local elsewhere, at = {}, {}  -- ids whose payload is in the payloads hash, and its reply place
local seen = {}  -- an id twice in the front: a stale entry, and the id enqueued again
for i = 1, n do
  local raw = raws[i]
  local fields, payload, prio, seq, enq, ma, mi, name, grp
  if raw and string.byte(raw, 1) == V4 and not seen[ids[i]] then
    fields, payload = split_record(raw)
    prio, seq, enq, ma, mi, name, grp = string.match(fields, RECORD_PATTERN_V4)
  end
  -- not a plain version 4 record (or a park group, or an id seen): claim.lua's
  if grp ~= '' then
    return CODE_GENERAL
  end
  seen[ids[i]] = true
  local r = 3 + (i - 1) * 11
  reply[r + 1], reply[r + 4], reply[r + 6], reply[r + 7] = ids[i], name, ma, mi
  reply[r + 8], reply[r + 9], reply[r + 10] = '0', '0', enq
  reply[r + 5] = payload or ''
  raws[i] = {prio, seq, enq, ma, mi, name, payload}
  if not payload then
    elsewhere[#elsewhere + 1] = ids[i]
    at[#elsewhere] = r + 5
  end
end
redis.call('LPOP', KEYS[9], int(n))
-- one token per job, in order (claim.lua's fence() of a record whose last
-- token is 0: the counter's next)
local top = redis.call('INCRBY', KEYS[7], int(n))
if top == n then
  -- the counter was just created: continue from the old counter, if any
  local old = tonumber(redis.call('HGET', KEYS[6], 'token') or '0') or 0
  if old > 0 then
    top = redis.call('INCRBY', KEYS[7], int(old))
  end
end
local lease_until = int(now + tonumber(ARGV[2]))
local worker_id, start_now = ARGV[3], tonumber(ARGV[4])
local records, leases = {}, {}
for i = 1, n do
  local f = raws[i]
  local token = int(top - n + i)
  local att, started = '0', 0
  if i <= start_now then
    att, started = '1', 1
  end
  local tail = f[7] and PAYLOAD_MARK .. f[7] or ''
  records[2 * i - 1] = ids[i]
  records[2 * i] = '2|leased|' .. token .. '|' .. att .. '|0|0|' .. f[4] .. '|' .. f[5] ..
    '|0|' .. started .. '|' .. f[1] .. '|' .. f[2] .. '|' .. f[3] .. '|' .. f[3] .. '|0|' ..
    now_text .. '|0|' .. f[6] .. '|' .. worker_id .. '|' .. tail
  leases[2 * i - 1] = lease_until
  leases[2 * i] = ids[i]
  local r = 3 + (i - 1) * 11
  reply[r + 2], reply[r + 3], reply[r + 11] = top - n + i, started, started
end
if #elsewhere > 0 then
  local got = redis.call('HMGET', KEYS[5], unpack(elsewhere))
  for k, place in ipairs(at) do
    reply[place] = got[k] or ''
  end
end
redis.call('HSET', jobs_key, unpack(records))
redis.call('ZADD', KEYS[3], unpack(leases))
redis.call('SET', KEYS[10], claim_id .. '\n' .. lease_until .. '\n' .. int(top - n + 1) .. '\n' ..
           int(top), 'PX', ARGV[2])
return reply
