-- enqueue_one.lua: add one job queued now at priority 0, its payload inside
-- its record, with no audit trail: what App.enqueue and SyncApp.enqueue send
-- for a job like that (scripts.OneJobCalls). Anything else goes through
-- enqueue.lua. Writes what enqueue.lua writes for the same job, with the
-- keys and the values it does not touch left out: each KEYS or ARGV entry
-- is a Lua string and a Redis object a call, and each helper a closure
-- (tests/test_one_job_calls.py holds the two scripts to the same writes).
-- KEYS[1] jobs         HASH   id -> job record
-- KEYS[2] stats        HASH   counters (seq, enqueued)
-- KEYS[3] line         LIST   queued ids of priority 0, in claim order
-- KEYS[4] wake         LIST   wake-up tokens for idle workers
-- ARGV[1] wake_cap        int   most tokens kept in the wake list
-- ARGV[2] name            str   job name
-- ARGV[3] max_attempts    int
-- ARGV[4] max_infra       int
-- ARGV[5] grp             str   its rate key to park it by, '' = none (claim.lua)
-- ARGV[6] payload         bytes at most INLINE_MAX, never empty
-- ARGV[7] id              str
-- Returns: 'queued' when it created the job; CODE_EXISTED when the id
-- exists (nothing is written but a gap in seq: the client asks enqueue.lua,
-- which answers the existing job's state).
-- Sent again: the id exists (the first run created it), so the second writes nothing but a gap
-- in seq and answers CODE_EXISTED where the first answered 'queued'; the client then asks
-- enqueue.lua, which answers CODE_EXISTED and the state: the caller is told created=True for
-- an id the client drew (producer.drawn_created), created=False for a given one (App.rerun
-- sends its call once for that reason).
local CODE_EXISTED = 0
local jobs_key, stats_key, id, payload = KEYS[1], KEYS[2], ARGV[7], ARGV[6]
if #payload > INLINE_MAX then
  return redis.error_reply('ERR enqueue_one: a payload over INLINE_MAX goes through enqueue.lua')
end
local now_text = ms_text(redis.call('TIME'))
local seq = redis.call('HINCRBY', stats_key, 'seq', '1')
-- record_around_seq's queued record (version 4), written out: prio 0, seq,
-- enq_ms (its ready_ms too), the budgets, name, grp, then the payload. The
-- seq as Lua prints a number (%.14g): exact as int() would print it for any
-- seq a queue reaches (the scores already bound it to SEQ_SPAN, 2^36)
local record = '4|0|' .. seq .. '|' .. now_text .. '|' .. ARGV[3] .. '|' .. ARGV[4] .. '|' ..
               ARGV[2] .. '|' .. ARGV[5] .. PAYLOAD_MARK .. payload
if redis.call('HSETNX', jobs_key, id, record) == 0 then
  return CODE_EXISTED
end
redis.call('RPUSH', KEYS[3], id)
redis.call('HINCRBY', stats_key, 'enqueued', '1')
-- wake(): one token while the list is under its cap
if redis.call('LLEN', KEYS[4]) < tonumber(ARGV[1]) then
  redis.call('RPUSH', KEYS[4], '1')
end
return 'queued'
