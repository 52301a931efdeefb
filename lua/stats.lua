-- stats.lua: a read-only snapshot of one queue. The oldest pending job is
-- found by walking the priority classes of the ready set (bounded) and the
-- first entries of the line. Ready counts the ready set and the line, less
-- the line's stale entries (jobs canceled while in it: _lib.lua, LINE_FLOOR).
-- KEYS[1] ready        ZSET   claimable ids of a priority other than 0, and put back at their place
-- KEYS[2] scheduled    ZSET   delayed ids
-- KEYS[3] leases       ZSET   leased ids
-- KEYS[4] dead         ZSET   dead ids
-- KEYS[5] done         ZSET   finished ids within retention
-- KEYS[6] jobs         HASH   id -> job record
-- KEYS[7] stats        HASH   counters
-- KEYS[8] paused       STRING set while the queue is paused
-- KEYS[9] line         LIST   queued ids of priority 0, in claim order (_lib.lua, LINE_FLOOR)
-- ARGV[1] max_classes      int   most priority classes walked
-- Returns: {now_ms, ready, scheduled, leased, dead, done, oldest_ready_ms
--           (-1: none), next_due_ms (-1: none), counters as a flat list,
--           paused (0|1)}; the
--           old 'token' counter of the stats hash (now the token key) and
--           'line_stale' (subtracted from ready) are left out
-- Sent again: reads only: the same answer as a first run at that moment (its now_ms is the
-- second run's).
local ready_key, scheduled_key, leases_key, dead_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local done_key, jobs_key, stats_key, paused_key = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local line_key = KEYS[9]
local max_classes = tonumber(ARGV[1])
local LINE_HEAD = 8  -- the line's first entries read for the oldest (stale ones are skipped)

local now = now_ms()
local oldest = -1
local floor = '-inf'
for _ = 1, max_classes do
  local first = redis.call('ZRANGEBYSCORE', ready_key, floor, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if #first == 0 then
    break
  end
  local meta = load_meta(jobs_key, first[1])
  local ready_ms = meta and tonumber(meta.ready_ms) or 0
  if ready_ms > 0 and (oldest < 0 or ready_ms < oldest) then
    oldest = ready_ms
  end
  -- the next class starts at the next multiple of SEQ_SPAN
  local class = math.floor(tonumber(first[2]) / SEQ_SPAN)
  floor = int((class + 1) * SEQ_SPAN)
end
-- the line is in enqueue order: its first queued entry is its oldest
for _, id in ipairs(redis.call('LRANGE', line_key, '0', int(LINE_HEAD - 1))) do
  local meta = load_meta(jobs_key, id)
  if meta and meta.state == 'queued' then
    local ready_ms = tonumber(meta.ready_ms) or 0
    if ready_ms > 0 and (oldest < 0 or ready_ms < oldest) then
      oldest = ready_ms
    end
    break
  end
end
local next_due = -1
local first_due = redis.call('ZRANGE', scheduled_key, 0, 0, 'WITHSCORES')
if #first_due > 0 then
  next_due = first_due[2]
end
local counters = {}
local line_stale = 0
local flat = redis.call('HGETALL', stats_key)
for i = 1, #flat, 2 do
  if flat[i] == 'line_stale' then
    line_stale = tonumber(flat[i + 1]) or 0
  elseif flat[i] ~= 'token' then
    counters[#counters + 1] = flat[i]
    counters[#counters + 1] = flat[i + 1]
  end
end
local ready = redis.call('ZCARD', ready_key) +
              math.max(0, redis.call('LLEN', line_key) - line_stale)
return {int(now), ready, redis.call('ZCARD', scheduled_key),
        redis.call('ZCARD', leases_key), redis.call('ZCARD', dead_key),
        redis.call('ZCARD', done_key), int(oldest), next_due, counters,
        redis.call('EXISTS', paused_key)}
